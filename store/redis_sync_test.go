package store

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// afterFirstPipeline calls then once, after the first pipeline of the
// client it is added to that sends a ZSCORE (not the connection's set-up).
type afterFirstPipeline struct{ then func() }

func (afterFirstPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (afterFirstPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (a *afterFirstPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if then := a.then; then != nil && hasZScore(cmds) {
			a.then = nil
			then()
		}
		return err
	}
}

func hasZScore(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c.Name() == "zscore" {
			return true
		}
	}
	return false
}

// A login's unread count that the persister trims under is never called
// exact when it is short: 3..9 are unread after read cursor 2, and the
// window of 5 that held 0..4 holds 5..9 by the time the count is taken.
func TestMemberCursorsUnreadTrimmedUnderTheCountIsNotExact(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	w := newTestRedis(t, newServerClient(t, srv), RedisConfig{WindowSize: 5})
	appendAll(t, w, batchOf("g1", span(0, 4)...)...)
	if err := w.AdvanceReads(ctx, []schema.Receipt{{Gid: "g1", Uid: "bob", Upto: 2}}); err != nil {
		t.Fatal(err)
	}

	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	trimmed := false
	c.AddHook(&afterFirstPipeline{then: func() {
		appendAll(t, w, batchOf("g1", span(5, 9)...)...) // window 5..9, floor 4
		trimmed = true
	}})
	r := newTestRedis(t, c, RedisConfig{WindowSize: 5})
	cur, err := r.MemberCursors(ctx, "bob", []string{"g1"})
	if err != nil {
		t.Fatal(err)
	}
	if !trimmed {
		t.Fatal("MemberCursors ran no pipeline; the test no longer appends under it")
	}
	if got := cur["g1"]; got.UnreadExact && got.Unread != 7 {
		t.Errorf("MemberCursors = %d unread, exact; want 7, or %d+ (not exact)", got.Unread, got.Unread)
	}
}

// An unread count Redis fails to take is an error, not "0 unread, exact":
// the floors read beside the counts answer redis.Nil for groups never
// trimmed, and that must not hide a failed count.
func TestMemberCursorsReportsAFailedCount(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	c := newServerClient(t, srv)
	r := newTestRedis(t, c, RedisConfig{WindowSize: 5})
	if err := c.Set(ctx, windowKey("g1"), "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// g0, first, has no floor: its GET fails with redis.Nil before g1's count.
	if cur, err := r.MemberCursors(ctx, "bob", []string{"g0", "g1"}); err == nil {
		t.Fatalf("MemberCursors over a window Redis cannot count = %+v, nil; want the WRONGTYPE error", cur["g1"])
	}
}
