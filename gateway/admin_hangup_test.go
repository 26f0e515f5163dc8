package gateway

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/topics"
)

// hangUpAt is a go-redis hook that, at the first script run naming key
// (MarkLeaving's, which writes it), runs hangUp (the caller gives up its
// request), gives the server a moment to cancel the request's context,
// and then lets the script run; done is closed once it has.
type hangUpAt struct {
	key    string
	hangUp func()
	done   chan struct{}
	fired  atomic.Bool
}

func (h *hangUpAt) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *hangUpAt) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *hangUpAt) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !scriptNames(cmd, h.key) || !h.fired.CompareAndSwap(false, true) {
			return next(ctx, cmd)
		}
		h.hangUp()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
		defer close(h.done)
		return next(ctx, cmd)
	}
}

// scriptNames reports whether cmd is a script run with key among its keys.
func scriptNames(cmd redis.Cmder, key string) bool {
	args := cmd.Args()
	if name := cmd.Name(); (name != "evalsha" && name != "eval") || len(args) < 3 {
		return false
	}
	n, ok := args[2].(int)
	for i := 3; ok && i < 3+n && i < len(args); i++ {
		if args[i] == key {
			return true
		}
	}
	return false
}

// An admin tool that gives up a removal after its leave is written, but
// before the leave is noted (MarkLeaving), and retries it before the member
// projector has the leave, writes no second leave: the removal runs to its
// end once it has written. A second leave, at a later head, would after a
// rebuild show bob what was sent between the two.
func TestARemovalGivenUpAfterItsLeaveIsWrittenIsNotWrittenTwice(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	e.parts["members"].stop() // the projection lags
	ctx, hangUp := context.WithCancel(context.Background())
	hook := &hangUpAt{key: "chat:{g1}:leaving:bob", hangUp: hangUp, done: make(chan struct{})}
	e.rc.AddHook(hook)
	before := e.topicEndsOf(topics.Members)

	req, _ := http.NewRequestWithContext(ctx, "DELETE", e.gws[0].srv.URL+"/v1/admin/groups/g1/members/bob", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the removal was answered (%s) before it was given up; the test needs it running then", resp.Status)
	}
	select {
	case <-hook.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the given-up removal never came to noting its leave")
	}
	if st, out := e.http("DELETE", "/v1/admin/groups/g1/members/bob", adminToken, nil); st != 404 {
		t.Errorf("the retried removal: %d %v, want 404 (bob is removed)", st, out)
	}
	if n := e.topicEndsOf(topics.Members) - before; n != 2 {
		t.Errorf("a removal given up and retried wrote %d member records, want 2 (its leaving and one leave)", n)
	}
}
