package store

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// The part of the Redis suite on cursors, membership and offsets.

func advanceAcks(t *testing.T, r *Redis, acks ...schema.Ack) {
	t.Helper()
	if err := r.AdvanceAcks(context.Background(), acks); err != nil {
		t.Fatalf("AdvanceAcks: %v", err)
	}
}

func ackCursors(t *testing.T, r *Redis, gid string) map[string]int64 {
	t.Helper()
	c, err := r.AckCursors(context.Background(), gid)
	if err != nil {
		t.Fatalf("AckCursors: %v", err)
	}
	return c
}

// A cursor is behind when its member's last ack of a batch is below the
// cursor stored after it: within the batch or across batches.
func testAcksBehind(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	steps := []struct {
		acks []schema.Ack
		want string
	}{
		{[]schema.Ack{{Gid: "g1", Uid: "u1", Upto: 100}, {Gid: "g1", Uid: "u1", Upto: 90}, {Gid: "g1", Uid: "u2", Upto: 5}}, "[{g1 u1 100}]"},
		{[]schema.Ack{{Gid: "g1", Uid: "u1", Upto: 95}}, "[{g1 u1 100}]"}, // below what an earlier batch stored
		{[]schema.Ack{{Gid: "g1", Uid: "u1", Upto: 100}}, "[]"},           // equal: the log's last word is the cursor
		{[]schema.Ack{{Gid: "g1", Uid: "u1", Upto: 90}, {Gid: "g1", Uid: "u1", Upto: 120}}, "[]"},
	}
	for i, st := range steps {
		behind, err := r.AdvanceAcksBehind(ctx, st.acks)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(behind); got != st.want && !(st.want == "[]" && behind == nil) {
			t.Errorf("step %d: behind %s, want %s", i, got, st.want)
		}
	}
	if got := ackCursors(t, r, "g1"); !maps.Equal(got, map[string]int64{"u1": 120, "u2": 5}) {
		t.Errorf("cursors %v", got)
	}
}

func testAcks(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	acks := []schema.Ack{
		{Gid: "g1", Uid: "u1", Upto: 5},
		{Gid: "g1", Uid: "u1", Upto: 3}, // late, lower: ignored
		{Gid: "g1", Uid: "u2", Upto: 7},
		{Gid: "g2", Uid: "u1", Upto: -1},
		{Gid: "g1", Uid: "u2", Upto: 9},
	}
	advanceAcks(t, r, acks...)
	want := map[string]int64{"u1": 5, "u2": 9}
	if got := ackCursors(t, r, "g1"); !maps.Equal(got, want) {
		t.Errorf("AckCursors(g1) = %v, want %v", got, want)
	}
	advanceAcks(t, r, schema.Ack{Gid: "g1", Uid: "u1", Upto: 2}, schema.Ack{Gid: "g1", Uid: "u2", Upto: 8})
	if got := ackCursors(t, r, "g1"); !maps.Equal(got, want) {
		t.Errorf("after lower acks: %v, want %v: cursors never move back", got, want)
	}
	advanceAcks(t, r, acks...) // replay
	if got := ackCursors(t, r, "g1"); !maps.Equal(got, want) {
		t.Errorf("after replay: %v, want %v", got, want)
	}
	if cur, ok, err := r.AckCursor(ctx, "g2", "u1"); err != nil || !ok || cur != -1 {
		t.Errorf("AckCursor(g2, u1) = %d, %v, %v; want -1, true", cur, ok, err)
	}
	if cur, ok, err := r.AckCursor(ctx, "g1", "u2"); err != nil || !ok || cur != 9 {
		t.Errorf("AckCursor(g1, u2) = %d, %v, %v; want 9, true", cur, ok, err)
	}
	if cur, ok, err := r.AckCursor(ctx, "g1", "nobody"); err != nil || ok || cur != -1 {
		t.Errorf("AckCursor(g1, nobody) = %d, %v, %v; want -1, false", cur, ok, err)
	}
	if got, err := r.ReadCursors(ctx, "g1"); err != nil || len(got) != 0 {
		t.Errorf("ReadCursors(g1) = %v, %v; acks must not move read cursors", got, err)
	}
	if err := r.AdvanceAcks(ctx, nil); err != nil {
		t.Errorf("AdvanceAcks(nil): %v", err)
	}
}

// testAcksShuffled applies the same acks in random orders and batchings:
// the cursors always end at the maximum.
func testAcksShuffled(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	rng := rand.New(rand.NewPCG(1, 2))
	var acks []schema.Ack
	want := map[string]map[string]int64{}
	for range 500 {
		a := schema.Ack{Gid: fmt.Sprint("g", rng.IntN(5)), Uid: fmt.Sprint("u", rng.IntN(20)), Upto: rng.Int64N(1000)}
		acks = append(acks, a)
		if want[a.Gid] == nil {
			want[a.Gid] = map[string]int64{}
		}
		if cur, ok := want[a.Gid][a.Uid]; !ok || a.Upto > cur {
			want[a.Gid][a.Uid] = a.Upto
		}
	}
	for round := range 3 {
		if err := c.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		rng.Shuffle(len(acks), func(i, j int) { acks[i], acks[j] = acks[j], acks[i] })
		for rest := acks; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(60))
			advanceAcks(t, r, rest[:n]...)
			rest = rest[n:]
		}
		for gid, w := range want {
			if got := ackCursors(t, r, gid); !maps.Equal(got, w) {
				t.Errorf("round %d: AckCursors(%s) = %v, want %v", round, gid, got, w)
			}
		}
	}
}

func testReads(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	rs := []schema.Receipt{
		{Gid: "g1", Uid: "u1", Upto: 8},
		{Gid: "g1", Uid: "u1", Upto: 4},
		{Gid: "g1", Uid: "u2", Upto: 2},
	}
	for range 2 { // the second time is a replay
		if err := r.AdvanceReads(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.AdvanceReads(ctx, []schema.Receipt{{Gid: "g1", Uid: "u2", Upto: 1}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"u1": 8, "u2": 2}
	if got, err := r.ReadCursors(ctx, "g1"); err != nil || !maps.Equal(got, want) {
		t.Errorf("ReadCursors = %v, %v; want %v", got, err, want)
	}
	if got := ackCursors(t, r, "g1"); len(got) != 0 {
		t.Errorf("AckCursors = %v; reads must not move ack cursors", got)
	}
}

func applyMembers(t *testing.T, r *Redis, ms ...schema.Member) {
	t.Helper()
	if err := r.ApplyMembers(context.Background(), ms); err != nil {
		t.Fatalf("ApplyMembers: %v", err)
	}
}

func join(gid, uid string, pos int64) schema.Member {
	return schema.Member{Gid: gid, Uid: uid, Op: schema.OpJoin, Pos: pos}
}

func leave(gid, uid string, pos int64) schema.Member {
	return schema.Member{Gid: gid, Uid: uid, Op: schema.OpLeave, Pos: pos}
}

// leaveJoined is a leave that names the join it ends, as writers do now.
func leaveJoined(gid, uid string, pos, joined int64) schema.Member {
	m := leave(gid, uid, pos)
	m.HasJoined, m.Joined = true, joined
	return m
}

func membership(t *testing.T, r *Redis, gid, uid string) Membership {
	t.Helper()
	m, err := r.Membership(context.Background(), gid, uid, nil)
	if err != nil {
		t.Fatalf("Membership(%s, %s): %v", gid, uid, err)
	}
	return m
}

func testMembership(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	joined := func(at int64) Membership { return Membership{State: MemberJoined, JoinedAt: at} }
	left := func(at, until int64) Membership { return Membership{State: MemberLeft, JoinedAt: at, LeftAt: until} }

	if m := membership(t, r, "g1", "u1"); m.State != MemberNone || m.Sees(0) {
		t.Errorf("before any event: %+v", m)
	}
	applyMembers(t, r, join("g1", "u1", 10), join("g1", "u2", -1), join("g2", "u1", 3))
	if m := membership(t, r, "g1", "u1"); m != joined(10) {
		t.Errorf("after join: %+v, want %+v", m, joined(10))
	}
	// A joiner starts at the head: both cursors at the join position.
	if cur, ok, err := r.AckCursor(ctx, "g1", "u1"); err != nil || !ok || cur != 10 {
		t.Errorf("ack cursor after join = %d, %v, %v; want 10", cur, ok, err)
	}
	if rc, err := r.ReadCursors(ctx, "g1"); err != nil || rc["u1"] != 10 || rc["u2"] != -1 {
		t.Errorf("read cursors after join = %v, %v; want u1 10, u2 -1", rc, err)
	}

	advanceAcks(t, r, schema.Ack{Gid: "g1", Uid: "u1", Upto: 15})
	applyMembers(t, r, join("g1", "u1", 10)) // a duplicate record changes nothing
	if m := membership(t, r, "g1", "u1"); m != joined(10) {
		t.Errorf("after a duplicate join: %+v, want %+v", m, joined(10))
	}
	if cur, _, _ := r.AckCursor(ctx, "g1", "u1"); cur != 15 {
		t.Errorf("ack cursor after a duplicate join = %d, want 15", cur)
	}
	applyMembers(t, r, leave("g1", "u1", 20))
	m := membership(t, r, "g1", "u1")
	if m != left(10, 20) {
		t.Errorf("after leave: %+v, want %+v", m, left(10, 20))
	}
	for id, want := range map[int64]bool{10: false, 11: true, 20: true, 21: false} {
		if m.Sees(id) != want {
			t.Errorf("left member Sees(%d) = %v, want %v", id, !want, want)
		}
	}
	applyMembers(t, r, leave("g1", "u1", 25)) // a repeated leave changes nothing
	if m := membership(t, r, "g1", "u1"); m != left(10, 20) {
		t.Errorf("after a second leave: %+v, want %+v", m, left(10, 20))
	}

	applyMembers(t, r, join("g1", "u1", 30)) // rejoin
	if m := membership(t, r, "g1", "u1"); m != joined(30) || m.Sees(30) || !m.Sees(31) {
		t.Errorf("after rejoin: %+v, want %+v", m, joined(30))
	}
	if cur, _, _ := r.AckCursor(ctx, "g1", "u1"); cur != 30 {
		t.Errorf("ack cursor after rejoin = %d, want 30", cur)
	}
	advanceAcks(t, r, schema.Ack{Gid: "g1", Uid: "u1", Upto: 50})
	applyMembers(t, r, leave("g1", "u1", 55), join("g1", "u1", 40)) // join below the cursor
	if cur, _, _ := r.AckCursor(ctx, "g1", "u1"); cur != 50 {
		t.Errorf("ack cursor after a join below it = %d, want 50: cursors never move back", cur)
	}

	// A leave without a known join (compacted away) grants nothing.
	applyMembers(t, r, leave("g1", "u3", 7))
	if m := membership(t, r, "g1", "u3"); m != left(7, 7) || m.Sees(7) || m.Sees(8) {
		t.Errorf("leave without join: %+v, want %+v", m, left(7, 7))
	}

	// A leave that names its join, replayed after compaction dropped the
	// join: the former member keeps their stretch. On a member whose join
	// is known, the known join wins.
	applyMembers(t, r, leaveJoined("g1", "u4", 12, 4))
	if m := membership(t, r, "g1", "u4"); m != left(4, 12) || m.Sees(4) || !m.Sees(5) || !m.Sees(12) || m.Sees(13) {
		t.Errorf("leave naming its join: %+v, want %+v", m, left(4, 12))
	}
	applyMembers(t, r, join("g1", "u5", 6), leaveJoined("g1", "u5", 9, 2))
	if m := membership(t, r, "g1", "u5"); m != left(6, 9) {
		t.Errorf("leave naming another join than the known one: %+v, want %+v", m, left(6, 9))
	}

	members, err := r.Members(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	wantMembers := map[string]Membership{"u1": joined(40), "u2": joined(-1), "u3": left(7, 7), "u4": left(4, 12), "u5": left(6, 9)}
	if !maps.Equal(members, wantMembers) {
		t.Errorf("Members(g1) = %v, want %v", members, wantMembers)
	}
	groups, err := r.UserGroups(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]Membership{"g1": joined(40), "g2": joined(3)}; !maps.Equal(groups, want) {
		t.Errorf("UserGroups(u1) = %v, want %v", groups, want)
	}
	if groups, err := r.UserGroups(ctx, "nobody"); err != nil || len(groups) != 0 {
		t.Errorf("UserGroups(nobody) = %v, %v", groups, err)
	}
}

// testMembershipReplay applies random event sequences, then replays random
// suffixes of them in random batches, as a consumer does after a crash: the
// state must come back to what the first pass left.
func testMembershipReplay(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	snapshot := func() string {
		var s string
		for _, key := range []string{membersKey("g0"), membersKey("g1"), userGroupsKey("u0"), userGroupsKey("u1"), userGroupsKey("u2")} {
			h, err := c.HGetAll(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			s += fmt.Sprint(key, h, " ")
		}
		for _, key := range []string{ackKey("g0"), readKey("g0"), ackKey("g1"), readKey("g1")} {
			z, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			s += fmt.Sprint(key, z, " ")
		}
		return s
	}
	batches := func(ms []schema.Member) {
		for len(ms) > 0 {
			n := min(len(ms), 1+rng.IntN(8))
			applyMembers(t, r, ms[:n]...)
			ms = ms[n:]
		}
	}
	for round := range 20 {
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var ms []schema.Member
		pos := int64(-1)
		for range 40 {
			pos += rng.Int64N(3) // positions repeat when no message came between
			e := join(fmt.Sprint("g", rng.IntN(2)), fmt.Sprint("u", rng.IntN(3)), pos)
			switch rng.IntN(4) {
			case 0:
				e.Op = schema.OpLeave
			case 1:
				e = leaveJoined(e.Gid, e.Uid, pos, rng.Int64N(pos+2)-1)
			}
			ms = append(ms, e)
		}
		batches(ms)
		want := snapshot()
		for range 5 {
			batches(ms[rng.IntN(len(ms)):])
			if got := snapshot(); got != want {
				t.Fatalf("round %d: replay changed the state:\nwant %s\ngot  %s\nevents %+v", round, want, got, ms)
			}
		}
	}
}

func testOffsets(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	if got, err := r.Offsets(ctx, "persister", "chat.messages"); err != nil || len(got) != 0 {
		t.Errorf("Offsets before any save = %v, %v; want none", got, err)
	}
	save := func(consumer, topic string, next map[int]int64) {
		t.Helper()
		if err := r.SaveOffsets(ctx, consumer, topic, next); err != nil {
			t.Fatalf("SaveOffsets: %v", err)
		}
	}
	save("persister", "chat.messages", map[int]int64{0: 10, 3: 42})
	save("persister", "chat.messages2", map[int]int64{0: 99})
	save("acks", "chat.messages", map[int]int64{0: 7})
	save("persister", "chat.messages", map[int]int64{3: 50, 5: 1})
	save("persister", "chat.messages", nil)
	want := map[int]int64{0: 10, 3: 50, 5: 1}
	if got, err := r.Offsets(ctx, "persister", "chat.messages"); err != nil || !maps.Equal(got, want) {
		t.Errorf("Offsets = %v, %v; want %v", got, err, want)
	}
	if got, err := r.Offsets(ctx, "persister", "chat.messages2"); err != nil || !maps.Equal(got, map[int]int64{0: 99}) {
		t.Errorf("Offsets of another topic = %v, %v", got, err)
	}

	// AdvanceOffset moves a position only from where its caller left it.
	for _, tc := range []struct {
		part     int
		from, to int64
		ok       bool
	}{
		{7, -1, 5, true},  // none saved: the first save
		{7, -1, 6, false}, // someone saved meanwhile
		{7, 5, 9, true},
		{7, 5, 12, false}, // moved on under the caller
		{3, 50, 60, true},
	} {
		ok, err := r.AdvanceOffset(ctx, "persister", "chat.messages", tc.part, tc.from, tc.to)
		if err != nil || ok != tc.ok {
			t.Errorf("AdvanceOffset(%d, %d -> %d) = %v, %v; want %v", tc.part, tc.from, tc.to, ok, err, tc.ok)
		}
	}
	want = map[int]int64{0: 10, 3: 60, 5: 1, 7: 9}
	if got, err := r.Offsets(ctx, "persister", "chat.messages"); err != nil || !maps.Equal(got, want) {
		t.Errorf("Offsets after AdvanceOffset = %v, %v; want %v", got, err, want)
	}
	// A wiped store: the position the caller holds is gone.
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := r.AdvanceOffset(ctx, "persister", "chat.messages", 7, 9, 20); err != nil || ok {
		t.Errorf("AdvanceOffset after a wipe = %v, %v; want false", ok, err)
	}
}

// testScriptCacheFlushed runs every script after SCRIPT FLUSH, as after a
// Redis restart: EVALSHA meets NOSCRIPT and the store falls back to EVAL.
func testScriptCacheFlushed(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 3})
	ctx := context.Background()
	for round := range 2 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		msgs := batchOf("g1", 0, 1)
		msgs[1].ClientMsgID = msgs[0].ClientMsgID
		dup, err := r.ClaimSends(ctx, nil, msgs)
		if err != nil || !slicesEqual(dup, []bool{false, true}) {
			t.Errorf("round %d: ClaimSends = %v, %v", round, dup, err)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		appendAll(t, r, msgs[:1]...)
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		applyMembers(t, r, join("g1", "u1", 0))
	}
	if ids, _ := window(t, r, "g1", -1, 10); !slicesEqual(ids, []int64{0}) {
		t.Errorf("window = %v, want [0]", ids)
	}
	if err := r.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
}
