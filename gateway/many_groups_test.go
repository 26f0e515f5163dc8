package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// memberOf makes each of uids a member of n groups, team-0 to team-<n-1>,
// with three messages each, written to Redis as the projections would
// (thousands of groups through the admin API and the broker take long).
func (e *env) memberOf(n int, uids ...string) {
	e.t.Helper()
	ctx := context.Background()
	for lo := 0; lo < n; lo += 500 {
		var joins []schema.Member
		var win []schema.Message
		for i := lo; i < min(lo+500, n); i++ {
			gid := "team-" + strconv.Itoa(i)
			for _, uid := range uids {
				joins = append(joins, schema.Member{Gid: gid, Uid: uid, Op: schema.OpJoin, Pos: -1})
			}
			for id := range int64(3) {
				win = append(win, schema.Message{Gid: gid, Sender: "bob", ClientMsgID: fmt.Sprint("c", id), SentAt: 1, Body: []byte("hi"), MsgID: id})
			}
		}
		if err := e.redis.ApplyMembers(ctx, joins); err != nil {
			e.t.Fatal(err)
		}
		if err := e.redis.AppendWindow(ctx, nil, win); err != nil {
			e.t.Fatal(err)
		}
	}
}

// answerOf reads frames until the answer with id, with a large read limit.
func (r *raw) answerOf(id string) map[string]any {
	r.t.Helper()
	r.ws.SetReadLimit(64 << 20)
	for {
		f := r.read()
		if f["id"] == id {
			return f
		}
	}
}

// A sync costs a connection one frame more per 100 groups it lists, as
// who_read costs one per 500 ids: a sync of 1,000 groups is 1,000 scripts
// in Redis (9-12 ms of its CPU), and at one frame each a connection had
// its Redis do that at its frame rate, 200 times a second, some 2 s of
// Redis CPU a second.
func TestASyncIsChargedByTheGroupsItLists(t *testing.T) {
	// 100 frames a second, bursts of 40.
	e := newEnv(t, envOpts{tune: func(c *Config) { c.SendRate, c.SendBurst = 1, 10 }})
	e.memberOf(1000, "alice")
	r := e.login(0, "alice")
	synced, limited := 0, 0
	for i := range 20 {
		id := fmt.Sprint("s", i)
		r.send(map[string]any{"op": "sync", "id": id})
		switch f := r.answerOf(id); {
		case f["op"] == protocol.OpSynced && len(f["groups"].([]any)) == 1000:
			synced++
		case f["code"] == string(protocol.CodeRateLimited):
			limited++
		default:
			t.Fatalf("sync %d: %.200v", i, f)
		}
	}
	if limited < 5 {
		t.Errorf("20 syncs of 1,000 groups each in a row with 40 frames of burst: %d answered, %d refused as rate_limited; want most refused", synced, limited)
	}
	if synced == 0 {
		t.Error("no sync answered")
	}
}

// syncPipelines is a go-redis hook that counts the pipelines of syncs'
// cursors (those of more than 100 EVALSHAs) in flight at once, and the
// most EVALSHAs one carried.
type syncPipelines struct {
	mu              sync.Mutex
	now, most, size int
}

func (h *syncPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *syncPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *syncPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" || c.Name() == "eval" {
				n++
			}
		}
		if n <= 100 {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.now++
		h.most, h.size = max(h.most, h.now), max(h.size, n)
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.now--
			h.mu.Unlock()
		}()
		return next(ctx, cmds)
	}
}

// A login storm of users in many groups leaves half the Redis client's
// pool to the rest, and a sync of many groups holds a connection for a
// thousand groups at a time: a sync read all its groups' cursors in one
// pipeline, which held a connection of the pool until its last reply, and
// 200 users in 1,000 groups each syncing at once took every connection:
// the presence refreshes, sends and acks waited behind them and failed
// past the pool's timeout (4 s), and a presence refresh that failed long
// enough had every connection told to sync again, a second storm.
func TestALoginStormLeavesHalfTheRedisPool(t *testing.T) {
	const pool = 8
	e := newEnv(t, envOpts{
		tune:      func(c *Config) { c.MaxAuthenticating = 1000 },
		redisOpts: func(o *redis.UniversalOptions) { o.PoolSize = pool },
	})
	const users = 40
	uids := make([]string, users)
	for i := range uids {
		uids[i] = fmt.Sprint("u", i)
	}
	e.memberOf(1000, uids...)
	e.memberOf(3000, "alice")
	conns := make([]*raw, users)
	for i, uid := range uids {
		conns[i] = e.login(0, uid)
	}
	alice := e.login(0, "alice")
	hook := &syncPipelines{}
	e.rc.AddHook(hook)
	var wg sync.WaitGroup
	for _, r := range append(conns, alice) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r.ws.SetReadLimit(64 << 20)
			if err := r.ws.Write(ctx, websocket.MessageText, []byte(`{"op":"sync","id":"s"}`)); err != nil {
				t.Error(err)
				return
			}
			if _, b, err := r.ws.Read(ctx); err != nil || !strings.HasPrefix(string(b), `{"op":"synced"`) {
				t.Errorf("a sync of the storm: %.100s %v", b, err)
			}
		}()
	}
	wg.Wait()
	if hook.most > pool/2 || hook.size > 1000 {
		t.Errorf("%d syncs at once had up to %d pipelines of cursors in flight for the pool's %d connections, of up to %d groups; want at most %d, of at most 1,000",
			users+1, hook.most, pool, hook.size, pool/2)
	}
}
