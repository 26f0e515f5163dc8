package store

import (
	"context"
	"math"
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
		if n := cmds[0].Name(); n == "get" || n == "mget" {
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

// Between a late append's ZADD and the trim that follows it, the window
// holds messages below its floor that are not its own. A reader must not
// take them: a pull joining ClickHouse's messages up to the floor with
// them would repeat messages, a page scrolling up would skip from them to
// the floor, and a fan-out taking one for a group's prev would let a
// client accept the next message over the gap, and an unread count would
// count them.
func TestAWindowReadDuringALateAppendSeesNothingBelowTheFloor(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	cfg := RedisConfig{WindowSize: 5}
	reader := newTestRedis(t, newServerClient(t, srv), cfg)
	owner := newTestRedis(t, newServerClient(t, srv), cfg)
	lc := newServerClient(t, srv)
	late := newTestRedis(t, lc, cfg)
	if err := owner.SaveOffsets(ctx, "persister", "chat.messages", map[int]int64{0: 15}); err != nil {
		t.Fatal(err)
	}

	checked := false
	read := func(done redis.Cmder) {
		if done.Name() != "zadd" {
			return
		}
		checked = true
		wr, err := reader.Window(ctx, "g1", -1, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		if wr.Floor != 9 || !slicesEqual(msgIDs(wr.Messages), span(10, 14)) {
			t.Errorf("Window(after -1) between the late ZADD and its trim = %v with floor %d, want 10..14 with floor 9", msgIDs(wr.Messages), wr.Floor)
		}
		wb, err := reader.WindowBefore(ctx, "g1", -1, 10, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(wb.Messages) > 0 {
			t.Errorf("WindowBefore(after -1, before 10) = %v with floor %d: a page of these skips to the floor", msgIDs(wb.Messages), wb.Floor)
		}
		prevs, err := reader.PersistedPrevs(ctx, "persister", "chat.messages", 0, math.MaxInt64, map[string]int64{"g1": 10})
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := prevs["g1"]; ok && p != 9 {
			t.Errorf("PersistedPrevs before 10 = %d, want 9 or unknown: a client holding %d would take 10 over the gap", p, p)
		}
		if n, exact, err := reader.Unread(ctx, "g1", -1); err != nil || n != 5 || exact {
			t.Errorf("Unread(after -1) = %d, %v, %v; want 5 and more (5+)", n, exact, err)
		}
		cs, err := reader.MemberCursors(ctx, "u", []string{"g1"})
		if c := cs["g1"]; err != nil || c.Unread != 5 || c.UnreadExact {
			t.Errorf("MemberCursors: unread %d, exact %v (%v); want 5 and more (5+)", c.Unread, c.UnreadExact, err)
		}
	}
	lc.AddHook(afterFloorsRead{once: &sync.Once{}, run: func() {
		appendAll(t, owner, batchOf("g1", span(0, 4)...)...)
		appendAll(t, owner, batchOf("g1", span(5, 14)...)...) // window 10..14, floor 9
		lc.AddHook(splitPipelines{between: read})
	}})
	appendAll(t, late, batchOf("g1", span(0, 4)...)...)
	if !checked {
		t.Fatal("the late append made no ZADD of its own; the test no longer reads between its ZADD and its trim")
	}
}
