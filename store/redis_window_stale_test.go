package store

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
)

// afterFloorsRead runs once after the first pipeline of the client it is
// added to that reads a key (an append's read of the floors, not the
// connection's set-up): another writer that goes ahead while this one is
// between reading the floors and writing.
type afterFloorsRead struct {
	once *sync.Once
	run  func()
}

func (afterFloorsRead) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (afterFloorsRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h afterFloorsRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if cmds[0].Name() == "get" {
			h.once.Do(h.run)
		}
		return err
	}
}

// A persister that stalls between reading a group's floor and writing its
// batch (frozen, or cut off from its consumer group) may resume after the
// partition's new owner has appended past the batch and trimmed it. Its
// late append must not lower the floor: the window would then claim to
// hold what the new owner trimmed, and a pull from below it would jump
// over those messages.
func TestALateAppendOfTrimmedMessagesKeepsTheFloor(t *testing.T) {
	srv := testserver.NewRedis(t)
	cfg := RedisConfig{WindowSize: 5}
	reader := newTestRedis(t, newServerClient(t, srv), cfg)
	owner := newTestRedis(t, newServerClient(t, srv), cfg)
	lc := newServerClient(t, srv)
	late := newTestRedis(t, lc, cfg)

	ran := false
	lc.AddHook(afterFloorsRead{once: &sync.Once{}, run: func() {
		ran = true
		appendAll(t, owner, batchOf("g1", span(0, 4)...)...)
		appendAll(t, owner, batchOf("g1", span(5, 14)...)...) // window 10..14, floor 9
	}})
	appendAll(t, late, batchOf("g1", span(0, 4)...)...)
	if !ran {
		t.Fatal("the late append read no floor; the test no longer puts the owner between its steps")
	}

	ids, complete := window(t, reader, "g1", 4, 100)
	if complete && len(ids) > 0 && ids[0] != 5 {
		t.Errorf("Window(after 4) = %v, complete: the run jumps over 5..%d", ids, ids[0]-1)
	}
	if !slicesEqual(ids, span(10, 14)) {
		t.Errorf("Window(after 4) = %v, want 10..14", ids)
	}
}
