package store

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// afterFirstPipeline calls then once, after the first pipeline of the
// client it is added to that reads a cursor (not the connection's set-up),
// or that has a command named name when name is set.
type afterFirstPipeline struct {
	name string
	then func()
}

func (afterFirstPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (afterFirstPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (a *afterFirstPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if then := a.then; then != nil && (a.name == "" && readsACursor(cmds) || a.name != "" && hasCommand(cmds, a.name)) {
			a.then = nil
			then()
		}
		return err
	}
}

func hasCommand(cmds []redis.Cmder, name string) bool {
	return slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == name })
}

func readsACursor(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if n := c.Name(); n == "zscore" || n == "evalsha" || n == "eval" {
			return true
		}
	}
	return false
}

// A login's head, cursors and unread count are of one moment, whatever the
// persister appends and trims meanwhile: 3 and 4 are unread after read
// cursor 2 at head 4, and the window of 5 that held 0..4 holds 5..9 after
// the first round trip. A count taken after a head read before it said 5
// unread (5..9, "5+") at head 4: more than the head leaves unread.
func TestMemberCursorsAreOfOneMoment(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	w := newTestRedis(t, newServerClient(t, srv), RedisConfig{WindowSize: 5})
	appendAll(t, w, batchOf("g1", span(0, 4)...)...)
	if err := w.AdvanceReads(ctx, []schema.Receipt{{Gid: "g1", Uid: "bob", Upto: 2}}); err != nil {
		t.Fatal(err)
	}

	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	appended := false
	c.AddHook(&afterFirstPipeline{then: func() {
		appendAll(t, w, batchOf("g1", span(5, 9)...)...) // window 5..9, floor 4
		appended = true
	}})
	r := newTestRedis(t, c, RedisConfig{WindowSize: 5})
	cur, err := r.MemberCursors(ctx, "bob", []string{"g1"})
	if err != nil {
		t.Fatal(err)
	}
	if !appended {
		t.Fatal("MemberCursors read no cursor; the test no longer appends under it")
	}
	// The first script run may be refused as not loaded yet, and the
	// append made before the retry: either moment is right.
	before := MemberCursors{Head: 4, Ack: -1, Read: 2, Unread: 2, UnreadExact: true}
	after := MemberCursors{Head: 9, Ack: -1, Read: 2, Unread: 5, UnreadExact: false}
	if got := cur["g1"]; got != before && got != after {
		t.Errorf("MemberCursors = %+v; want %+v (before the append) or %+v (after)", got, before, after)
	}
}

// A member with no cursors in a group counts from its first message, and a
// group with no messages yet reads as head -1 with nothing unread.
func TestMemberCursorsWithoutCursors(t *testing.T) {
	ctx := context.Background()
	r := newTestRedis(t, newServerClient(t, testserver.NewRedis(t)), RedisConfig{WindowSize: 5})
	appendAll(t, r, batchOf("g1", span(0, 2)...)...)
	if err := r.AdvanceAcks(ctx, []schema.Ack{{Gid: "g1", Uid: "bob", Upto: 1}}); err != nil {
		t.Fatal(err)
	}
	cur, err := r.MemberCursors(ctx, "bob", []string{"g1", "empty"})
	if err != nil {
		t.Fatal(err)
	}
	for gid, want := range map[string]MemberCursors{
		"g1":    {Head: 2, Ack: 1, Read: -1, Unread: 3, UnreadExact: true},
		"empty": {Head: -1, Ack: -1, Read: -1, Unread: 0, UnreadExact: true},
	} {
		if got := cur[gid]; got != want {
			t.Errorf("MemberCursors[%s] = %+v; want %+v", gid, got, want)
		}
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
	if err := c.Set(ctx, headKey("g1"), "3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// g0, first, has no floor: its GET fails with redis.Nil before g1's count.
	if cur, err := r.MemberCursors(ctx, "bob", []string{"g0", "g1"}); err == nil {
		t.Fatalf("MemberCursors over a window Redis cannot count = %+v, nil; want the WRONGTYPE error", cur["g1"])
	}
}

// CursorStates reads the groups of a cursors frame in one round trip, and
// answers for each what CursorState answers for it alone: a member's
// head and cursors, one who never joined as none, one who left with the
// leave.
func TestCursorStatesAnswerAsCursorStateInOneRoundTrip(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	counted := &countPipelines{}
	rc := newServerClient(t, srv)
	w := newTestRedis(t, rc, RedisConfig{WindowSize: 5})
	appendAll(t, w, append(batchOf("g1", span(0, 4)...), batchOf("g2", span(5, 6)...)...)...)
	if err := w.ApplyMembers(ctx, []schema.Member{
		{Gid: "g1", Uid: "bob", Op: schema.OpJoin, Pos: -1}, {Gid: "g2", Uid: "bob", Op: schema.OpJoin, Pos: -1},
		{Gid: "g2", Uid: "bob", Op: schema.OpLeave, Pos: 5}}); err != nil {
		t.Fatal(err)
	}
	if err := w.AdvanceReads(ctx, []schema.Receipt{{Gid: "g1", Uid: "bob", Upto: 2}}); err != nil {
		t.Fatal(err)
	}
	gids := []string{"g1", "g2", "g3"}
	var asks []CursorAsk
	for _, g := range gids {
		asks = append(asks, CursorAsk{Gid: g})
	}
	rc.AddHook(counted)
	sts, errs := w.CursorStates(ctx, "bob", asks)
	if counted.n != 1 {
		t.Errorf("%d round trips for %d groups, want 1", counted.n, len(gids))
	}
	for i, g := range gids {
		want, err := w.CursorState(ctx, g, "bob", nil)
		if err != nil || errs[i] != nil || sts[i] != want {
			t.Errorf("%s: CursorStates %+v, %v; CursorState %+v, %v", g, sts[i], errs[i], want, err)
		}
	}
	if sts[0].Read != 2 || sts[1].Member.State != MemberLeft || sts[2].Member.State != MemberNone {
		t.Errorf("states %+v: want g1 read 2, g2 left, g3 none", sts)
	}
}

// countPipelines counts the pipelines of a client.
type countPipelines struct{ n int }

func (*countPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*countPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (c *countPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n++
		return next(ctx, cmds)
	}
}
