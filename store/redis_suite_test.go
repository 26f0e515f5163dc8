package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// runRedisSuite is the conformance suite of the Redis store. newClient
// returns a client on an empty database; it is called once per subtest.
func runRedisSuite(t *testing.T, newClient func(t *testing.T) redis.UniversalClient) {
	tests := []struct {
		name string
		fn   func(t *testing.T, c redis.UniversalClient)
	}{
		{"ClaimSendsInBatch", testClaimSendsInBatch},
		{"ClaimSendsAcrossBatches", testClaimSendsAcrossBatches},
		{"ClaimSendsReplay", testClaimSendsReplay},
		{"ClaimSendsDedupWindow", testClaimSendsDedupWindow},
		{"ClaimSendsIndependent", testClaimSendsIndependent},
		{"ClaimSendsExpiry", testClaimSendsExpiry},
		{"ClaimSendsAbsurdSentAt", testClaimSendsAbsurdSentAt},
		{"SendClaims", testSendClaims},
		{"SendsOfAMemberBeingRemoved", testSendsOfAMemberBeingRemoved},
		{"MembershipBuilt", testMembershipBuilt},
		{"CursorState", testCursorState},
		{"CursorStatesShareRoundTrips", testCursorStatesShareRoundTrips},
		{"CursorStatesFailTogether", testCursorStatesFailTogether},
		{"WindowTrimFloor", testWindowTrimFloor},
		{"WindowPaging", testWindowPaging},
		{"WindowBefore", testWindowBefore},
		{"WindowReplay", testWindowReplay},
		{"WindowBigBatch", testWindowBigBatch},
		{"WindowFloorOfARoundScore", testWindowFloorOfARoundScore},
		{"WindowBytes", testWindowBytes},
		{"WindowSenders", testWindowSenders},
		{"WindowSizeRecord", testWindowSizeRecord},
		{"Head", testHead},
		{"Unread", testUnread},
		{"Acks", testAcks},
		{"AcksBehind", testAcksBehind},
		{"AcksShuffled", testAcksShuffled},
		{"Reads", testReads},
		{"Membership", testMembership},
		{"MembershipReplay", testMembershipReplay},
		{"MembershipFold", testMembershipFold},
		{"MembershipReplayAt", testMembershipReplayAt},
		{"ReserveJoins", testReserveJoins},
		{"ReserveJoinsAtOnce", testReserveJoinsAtOnce},
		{"ReserveJoinsExpire", testReserveJoinsExpire},
		{"ReserveJoinsKnownLate", testReserveJoinsKnownLate},
		{"GroupKnown", testGroupKnown},
		{"GroupCounts", testGroupCounts},
		{"ReserveGroups", testReserveGroups},
		{"HeldJoinsKeepTheirGroupPlaces", testHeldJoinsKeepTheirGroupPlaces},
		{"ExtendJoining", testExtendJoining},
		{"HoldJoinsStop", testHoldJoinsStop},
		{"MarkLeavingPrunes", testMarkLeavingPrunes},
		{"Presence", testPresence},
		{"PushRoute", testPushRoute},
		{"PersistedPrevs", testPersistedPrevs},
		{"Offsets", testOffsets},
		{"ScriptCacheFlushed", testScriptCacheFlushed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newClient(t)) })
	}
}

func newTestRedis(t testing.TB, c redis.UniversalClient, cfg RedisConfig) *Redis {
	t.Helper()
	r, err := NewRedis(c, cfg)
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	return r
}

// t0 is a sent_at in the past, well outside any claim TTL.
var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

func msg(gid, sender, cmid string, id, sentAt int64) schema.Message {
	return schema.Message{
		Gid: gid, Sender: sender, ClientMsgID: cmid, SentAt: sentAt,
		Body: fmt.Appendf(nil, "body of %s/%d", gid, id), MsgID: id,
	}
}

func claim(t *testing.T, r *Redis, msgs ...schema.Message) []bool {
	t.Helper()
	dup, err := r.ClaimSends(context.Background(), nil, msgs)
	if err != nil {
		t.Fatalf("ClaimSends: %v", err)
	}
	return dup
}

func wantDup(t *testing.T, what string, got []bool, want ...bool) {
	t.Helper()
	if !slicesEqual(got, want) {
		t.Errorf("%s: dup = %v, want %v", what, got, want)
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func testClaimSendsInBatch(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	got := claim(t, r,
		msg("g1", "alice", "c1", 0, t0),
		msg("g1", "alice", "", 1, t0),
		msg("g1", "alice", "c1", 2, t0+1000), // resend
		msg("g1", "alice", "", 3, t0),        // no client_msg_id: never a duplicate
		msg("g1", "alice", "c2", 4, t0),
		msg("g1", "alice", "c1", 5, t0+2000), // second resend
	)
	wantDup(t, "one batch", got, false, false, true, false, false, true)
}

func testClaimSendsAcrossBatches(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	wantDup(t, "first", claim(t, r, msg("g1", "alice", "c1", 10, t0)), false)
	wantDup(t, "resend", claim(t, r, msg("g1", "alice", "c1", 11, t0+5000)), true)
	// sent_at of a resend may come from a gateway whose clock is behind.
	wantDup(t, "resend, earlier clock", claim(t, r, msg("g1", "alice", "c1", 12, t0-5000)), true)
	wantDup(t, "other id", claim(t, r, msg("g1", "alice", "c2", 13, t0+5000)), false)
}

func testClaimSendsReplay(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{DedupWindow: time.Minute})
	batch := []schema.Message{
		msg("g1", "alice", "c1", 0, t0),
		msg("g1", "alice", "c1", 1, t0+1000),                                  // duplicate of 0
		msg("g1", "alice", "c1", 2, t0+int64(5*time.Minute/time.Millisecond)), // outside: claims again
		msg("g1", "alice", "c1", 3, t0+int64(5*time.Minute/time.Millisecond)+1000),
	}
	want := []bool{false, true, false, true}
	wantDup(t, "first pass", claim(t, r, batch...), want...)
	// A crash before the commit replays the batch, or any suffix of it, or
	// single messages, while Redis already holds the claims of all of them.
	wantDup(t, "replay", claim(t, r, batch...), want...)
	for i := range batch {
		wantDup(t, fmt.Sprintf("replay from %d", i), claim(t, r, batch[i:]...), want[i:]...)
		wantDup(t, fmt.Sprintf("replay of %d", i), claim(t, r, batch[i]), want[i])
	}
}

func testClaimSendsDedupWindow(t *testing.T, c redis.UniversalClient) {
	const w = time.Hour
	r := newTestRedis(t, c, RedisConfig{DedupWindow: w})
	ms := int64(w / time.Millisecond)
	got := claim(t, r,
		msg("g1", "alice", "c1", 0, t0),
		msg("g1", "alice", "c1", 1, t0+ms),   // exactly at the window: duplicate
		msg("g1", "alice", "c1", 2, t0+ms+1), // past it: a new message
		msg("g1", "alice", "c1", 3, t0+2*ms), // within the window of 2
	)
	wantDup(t, "by sent_at", got, false, true, false, true)
}

func testClaimSendsIndependent(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	got := claim(t, r,
		msg("g1", "alice", "c1", 0, t0),
		msg("g1", "bob", "c1", 1, t0),   // other sender
		msg("g2", "alice", "c1", 2, t0), // other group
		msg("g1", "a:b", "c", 3, t0),    // ":" inside ids must not collide...
		msg("g1", "a", "b:c", 4, t0),    // ...with this one
		msg("g1", "bob", "c1", 5, t0),   // bob's resend
	)
	wantDup(t, "independent", got, false, false, false, false, false, true)
}

func testClaimSendsExpiry(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{DedupWindow: time.Hour})
	ctx := context.Background()
	now := time.Now().UnixMilli()
	claim(t, r, msg("g1", "alice", "live", 0, now), msg("g1", "alice", "old", 1, t0))
	live, err := c.PTTL(ctx, claimKey("g1", "alice", "live")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if live < 59*time.Minute || live > time.Hour {
		t.Errorf("claim of a live send expires in %v, want about the dedup window (1h)", live)
	}
	old, err := c.PTTL(ctx, claimKey("g1", "alice", "old")).Result()
	if err != nil {
		t.Fatal(err)
	}
	if old <= 0 || old > claimReplayTTL {
		t.Errorf("claim of a replayed old send expires in %v, want (0, %v]", old, claimReplayTTL)
	}
}

// appendAll appends and fails the test on error.
func appendAll(t testing.TB, r *Redis, msgs ...schema.Message) {
	t.Helper()
	if err := r.AppendWindow(context.Background(), nil, msgs); err != nil {
		t.Fatalf("AppendWindow: %v", err)
	}
}

func window(t *testing.T, r *Redis, gid string, after int64, limit int) ([]int64, bool) {
	t.Helper()
	wr, err := r.Window(context.Background(), gid, after, limit, 0)
	if err != nil {
		t.Fatalf("Window(%q, %d, %d): %v", gid, after, limit, err)
	}
	return msgIDs(wr.Messages), after >= wr.Floor // complete: nothing of the range was trimmed
}

func msgIDs(msgs []schema.Message) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.MsgID
	}
	return ids
}

func span(from, to int64) []int64 {
	var ids []int64
	for id := from; id <= to; id++ {
		ids = append(ids, id)
	}
	return ids
}

func batchOf(gid string, ids ...int64) []schema.Message {
	msgs := make([]schema.Message, len(ids))
	for i, id := range ids {
		msgs[i] = msg(gid, "alice", fmt.Sprint("c", id), id, t0+id)
	}
	return msgs
}

func testWindowTrimFloor(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 5})
	ctx := context.Background()
	appendAll(t, r, batchOf("g1", span(0, 3)...)...)
	if ids, complete := window(t, r, "g1", -1, 100); !slicesEqual(ids, span(0, 3)) || !complete {
		t.Errorf("before trim: %v complete=%v, want 0..3 complete", ids, complete)
	}
	appendAll(t, r, batchOf("g1", span(4, 9)...)...)
	for _, tc := range []struct {
		after    int64
		want     []int64
		complete bool
	}{
		{-1, span(5, 9), false}, // 0..4 trimmed: floor 4
		{3, span(5, 9), false},
		{4, span(5, 9), true},
		{7, span(8, 9), true},
		{9, nil, true},
	} {
		if ids, complete := window(t, r, "g1", tc.after, 100); !slicesEqual(ids, tc.want) || complete != tc.complete {
			t.Errorf("after %d: %v complete=%v, want %v complete=%v", tc.after, ids, complete, tc.want, tc.complete)
		}
	}
	// The messages come back whole.
	wr, err := r.Window(ctx, "g1", 6, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := batchOf("g1", 7); !reflect.DeepEqual(wr.Messages, want) {
		t.Errorf("window message = %+v, want %+v", wr.Messages, want)
	}
	if h, _ := r.Head(ctx, "g1"); wr.Head != h || h < 7 {
		t.Errorf("Window's head = %d, want Head's %d", wr.Head, h)
	}
	if ids, complete := window(t, r, "nobody", -1, 10); len(ids) != 0 || !complete {
		t.Errorf("unknown group: %v complete=%v, want nothing, complete", ids, complete)
	}
	if _, err := r.Window(ctx, "g1", -1, 0, 0); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("limit 0: err = %v, want ErrInvalidLimit", err)
	}
}

func testWindowPaging(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: -1})
	// Two groups on one partition: each group's msgids have gaps.
	var all []schema.Message
	var g1 []int64
	for id := int64(0); id < 100; id++ {
		gid := "g2"
		if id%3 != 0 {
			gid = "g1"
			g1 = append(g1, id)
		}
		all = append(all, msg(gid, "alice", "", id, t0+id))
	}
	appendAll(t, r, all[:50]...)
	appendAll(t, r, all[50:]...)
	var got []int64
	after := int64(-1)
	for page := 0; ; page++ {
		ids, complete := window(t, r, "g1", after, 7)
		if !complete {
			t.Fatalf("page %d: unbounded window not complete", page)
		}
		if len(ids) == 0 {
			break
		}
		if len(ids) > 7 {
			t.Fatalf("page %d: %d messages, limit 7", page, len(ids))
		}
		got = append(got, ids...)
		after = ids[len(ids)-1]
	}
	if !slicesEqual(got, g1) {
		t.Errorf("pages joined = %v,\nwant every message of g1 in order %v", got, g1)
	}
}

func testWindowReplay(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 5})
	ctx := context.Background()
	first := batchOf("g1", span(0, 6)...)
	appendAll(t, r, first...)
	state := func() string {
		win, err := c.ZRangeWithScores(ctx, windowKey("g1"), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		floor, _ := c.Get(ctx, floorKey("g1")).Result()
		head, _ := c.Get(ctx, headKey("g1")).Result()
		return fmt.Sprintf("win=%v floor=%s head=%s", win, floor, head)
	}
	before := state()
	appendAll(t, r, first...)     // the whole batch again
	appendAll(t, r, first[:2]...) // trimmed messages only
	appendAll(t, r, first[4:]...) // present messages only
	if after := state(); after != before {
		t.Errorf("replay changed the window:\nbefore %s\nafter  %s", before, after)
	}
	if ids, complete := window(t, r, "g1", -1, 100); !slicesEqual(ids, span(2, 6)) || complete {
		t.Errorf("after replay: %v complete=%v, want 2..6 incomplete", ids, complete)
	}
}

func testWindowBigBatch(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 5})
	appendAll(t, r, batchOf("g1", span(0, 3)...)...)
	// More messages than the window in one batch, out of order, and one
	// twice: only the newest five stay, the floor is the sixth newest.
	batch := batchOf("g1", 19, 10, 11, 12, 13, 14, 15, 16, 17, 18, 18)
	appendAll(t, r, batch...)
	if ids, complete := window(t, r, "g1", -1, 100); !slicesEqual(ids, span(15, 19)) || complete {
		t.Errorf("window = %v complete=%v, want 15..19 incomplete", ids, complete)
	}
	if _, complete := window(t, r, "g1", 14, 100); !complete {
		t.Errorf("after 14: incomplete, want floor 14")
	}
	if _, complete := window(t, r, "g1", 13, 100); complete {
		t.Errorf("after 13: complete, want floor 14")
	}
	appendAll(t, r, batch...)
	if ids, _ := window(t, r, "g1", -1, 100); !slicesEqual(ids, span(15, 19)) {
		t.Errorf("after replay: %v, want 15..19", ids)
	}
	if h, err := r.Head(context.Background(), "g1"); err != nil || h != 19 {
		t.Errorf("Head = %d, %v; want 19", h, err)
	}
}

func testHead(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: -1})
	ctx := context.Background()
	if h, err := r.Head(ctx, "g1"); err != nil || h != -1 {
		t.Errorf("Head of an empty group = %d, %v; want -1", h, err)
	}
	appendAll(t, r, batchOf("g1", 3, 10)...)
	appendAll(t, r, batchOf("g2", 4)...)
	appendAll(t, r, batchOf("g1", 5)...) // a replay of an older message
	heads, err := r.Heads(ctx, []string{"g1", "g2", "g3"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"g1": 10, "g2": 4, "g3": -1}; !maps.Equal(heads, want) {
		t.Errorf("Heads = %v, want %v", heads, want)
	}
	if h, err := r.Head(ctx, "g1"); err != nil || h != 10 {
		t.Errorf("Head(g1) = %d, %v; want 10: the head never goes back", h, err)
	}
	if heads, err := r.Heads(ctx, nil); err != nil || len(heads) != 0 {
		t.Errorf("Heads(nil) = %v, %v", heads, err)
	}
}

func testUnread(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 5})
	ctx := context.Background()
	appendAll(t, r, batchOf("g1", span(0, 9)...)...) // window 5..9, floor 4
	for _, tc := range []struct {
		cursor int64
		n      int64
		exact  bool
	}{
		{9, 0, true},
		{6, 3, true},
		{4, 5, true},
		{3, 5, false}, // "5+"
		{-1, 5, false},
	} {
		n, exact, err := r.Unread(ctx, "g1", tc.cursor)
		if err != nil || n != tc.n || exact != tc.exact {
			t.Errorf("Unread(cursor %d) = %d exact=%v %v; want %d exact=%v", tc.cursor, n, exact, err, tc.n, tc.exact)
		}
	}
	if n, exact, err := r.Unread(ctx, "empty", -1); err != nil || n != 0 || !exact {
		t.Errorf("Unread of an empty group = %d exact=%v %v; want 0 exact", n, exact, err)
	}
	// A floor in a score's form, as miniredis writes a trim's at 10^8.
	appendAll(t, r, batchOf("big", 1e8+1, 1e8+2)...)
	if err := c.Set(ctx, floorKey("big"), "1e+08", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, exact, err := r.Unread(ctx, "big", 1e8); err != nil || n != 2 || !exact {
		t.Errorf("Unread above a floor of 1e+08 = %d exact=%v %v; want 2 exact", n, exact, err)
	}
	if cs, err := r.MemberCursors(ctx, "u", []string{"big"}); err != nil || cs["big"].Unread != 2 || cs["big"].UnreadExact {
		t.Errorf("MemberCursors above a floor of 1e+08 = %+v, %v; want 2 and more", cs["big"], err)
	}
}

// A floor trimmed at a round msgid is written from its score, which
// miniredis writes as "1e+8", a form its Lua's tonumber does not read: the
// next append then failed for good, and the group's partition with it. The
// window goes on past it, and counts and syncs read it.
func testWindowFloorOfARoundScore(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 2})
	ctx := context.Background()
	appendAll(t, r, batchOf("g1", 1e8, 1e8+1)...)
	appendAll(t, r, batchOf("g1", 1e8+2)...) // trims 1e8, the window's, by its score
	appendAll(t, r, batchOf("g1", 1e8+3)...)
	appendAll(t, r, batchOf("g1", 1e8+4, 1e8+5)...)
	if ids, complete := window(t, r, "g1", 1e8+3, 10); !slicesEqual(ids, []int64{1e8 + 4, 1e8 + 5}) || !complete {
		t.Errorf("window after 1e8+3 = %v, complete %v; want [1e8+4 1e8+5], complete", ids, complete)
	}
	if n, exact, err := r.Unread(ctx, "g1", 1e8+3); err != nil || n != 2 || !exact {
		t.Errorf("Unread after 1e8+3 = %d, %v, %v; want 2, exact", n, exact, err)
	}
	if cs, err := r.MemberCursors(ctx, "u", []string{"g1"}); err != nil || cs["g1"].Head != 1e8+5 || cs["g1"].UnreadExact {
		t.Errorf("MemberCursors = %+v, %v; want head 1e8+5, not exact (u read nothing)", cs["g1"], err)
	}
}
