package store

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// readsFixture is one group on a real redis-server: 300 messages in the
// window at msgids 3i+1 (other groups share the partition), 40 members who
// joined at different points, some of whom left, each with a read cursor.
func readsFixture(t *testing.T) (*Redis, []schema.Message) {
	t.Helper()
	srv := testserver.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	r := newTestRedis(t, c, RedisConfig{WindowSize: -1})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	var events []schema.Member
	var reads []schema.Receipt
	for i := range 40 {
		uid := "u" + strconv.Itoa(i)
		join := int64(-1)
		if i%3 == 1 {
			join = int64(rng.IntN(900))
		}
		events = append(events, schema.Member{Gid: "g", Uid: uid, Op: schema.OpJoin, Pos: join, At: t0})
		if i%7 == 2 {
			events = append(events, schema.Member{Gid: "g", Uid: uid, Op: schema.OpLeave, Pos: join + 1 + int64(rng.IntN(300)), At: t0})
		}
		if i%5 != 4 { // a fifth never read anything
			reads = append(reads, schema.Receipt{Gid: "g", Uid: uid, Upto: int64(rng.IntN(950)), At: t0})
		}
	}
	if err := r.ApplyMembers(ctx, events); err != nil {
		t.Fatal(err)
	}
	if err := r.AdvanceReads(ctx, reads); err != nil {
		t.Fatal(err)
	}
	msgs := make([]schema.Message, 300)
	for i := range msgs {
		msgs[i] = msg("g", "u"+strconv.Itoa(i%40), "c"+strconv.Itoa(i), int64(3*i+1), t0)
	}
	if err := r.AppendWindow(ctx, nil, msgs); err != nil {
		t.Fatal(err)
	}
	return r, msgs
}

func TestReadStateCountMatchesItsMaps(t *testing.T) {
	r, msgs := readsFixture(t)
	st, err := r.ReadState(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	byHand := &ReadState{Members: st.Members, Reads: st.Reads}
	nonzero := 0
	for _, m := range msgs {
		for _, sender := range []string{m.Sender, "u0", "nobody"} {
			read, aud := st.Count(m.MsgID, sender)
			hRead, hAud := byHand.Count(m.MsgID, sender)
			var wRead, wAud int
			for uid, ms := range st.Members {
				if uid != sender && ms.Sees(m.MsgID) {
					wAud++
					if c, ok := st.Reads[uid]; ok && c >= m.MsgID {
						wRead++
					}
				}
			}
			if read != wRead || aud != wAud || hRead != wRead || hAud != wAud {
				t.Fatalf("%d from %s: Count %d/%d, by hand %d/%d, want %d/%d", m.MsgID, sender, read, aud, hRead, hAud, wRead, wAud)
			}
			if read > 0 && read < aud {
				nonzero++
			}
		}
	}
	if nonzero < 100 {
		t.Fatalf("only %d counts strictly between 0 and the audience: the fixture does not exercise Count", nonzero)
	}
}

// A read state is one snapshot: a rejoin between reading the members and
// the read cursors must not pair the old membership with the cursor the
// rejoin raised, which would count alice as a reader of 3, sent while she
// was a member, that she never read.
func TestReadStateIsOneSnapshot(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	w := newTestRedis(t, newServerClient(t, srv), RedisConfig{})
	join := func(uid string, pos int64) schema.Member {
		return schema.Member{Gid: "g1", Uid: uid, Op: schema.OpJoin, Pos: pos}
	}
	leave := schema.Member{Gid: "g1", Uid: "alice", Op: schema.OpLeave, Pos: 5}
	if err := w.ApplyMembers(ctx, []schema.Member{join("bob", 0), join("alice", 0), leave}); err != nil {
		t.Fatal(err)
	}

	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	calls := 0
	c.AddHook(splitPipelines{between: func(done redis.Cmder) {
		// After the members are read, or after the whole read if it is
		// one transaction.
		if name := done.Name(); calls == 0 && (name == "hgetall" || name == "multi") {
			calls++
			if err := w.ApplyMembers(ctx, []schema.Member{join("alice", 10)}); err != nil {
				t.Error(err)
			}
		}
	}})
	st, err := newTestRedis(t, c, RedisConfig{}).ReadState(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal("ReadState ran no pipeline; the test no longer rejoins under it")
	}
	if read, _ := st.Count(3, "bob"); read != 0 {
		t.Errorf("Count(3) = %d read, with members %v and reads %v; want 0: alice never read 3", read, st.Members, st.Reads)
	}
}

// A message's sender is read out of the window without its body, for a
// page (a range of the window, read at once) and for msgids scattered over
// it (read one by one): msgids trimmed, between messages, past the newest
// or of another group are absent, and a gid and sender of the longest
// length (128 bytes, written with a two-byte length) are read whole.
func testWindowSenders(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 30})
	ctx := context.Background()
	gid := strings.Repeat("g", schema.MaxIDLen)
	long := strings.Repeat("s", schema.MaxIDLen)
	var msgs []schema.Message
	for i := range 34 { // msgids 0, 3, ..., 99; 0 to 9 trimmed
		sender := "u" + strconv.Itoa(i%3)
		if i%4 == 1 {
			sender = long
		}
		msgs = append(msgs, msg(gid, sender, "c"+strconv.Itoa(i), int64(3*i), t0))
	}
	appendAll(t, r, append(msgs, msg("g2", "bob", "c", 1, t0))...)
	for name, ids := range map[string][]int64{
		"a page":    {0, 9, 12, 13, 1, 15, 18, 21, 24, 27, 30},
		"scattered": {99, 12, 1, 9, 100, 5000, 51, 52, 15},
		"one":       {27},
		"none":      nil,
	} {
		want := map[int64]string{}
		for _, m := range msgs {
			if m.MsgID >= 12 && slices.Contains(ids, m.MsgID) {
				want[m.MsgID] = m.Sender
			}
		}
		if got, err := r.WindowSenders(ctx, gid, ids); err != nil || !maps.Equal(got, want) {
			t.Errorf("%s: WindowSenders(%v) = %v, %v; want %v", name, ids, got, err, want)
		}
	}
	if err := c.ZAdd(ctx, windowKey(gid), redis.Z{Score: 50, Member: "\x00\x00\x00\x00\x00\x00\x00\x32not a message"}).Err(); err != nil {
		t.Fatal(err)
	}
	for _, ids := range [][]int64{{48, 50}, {12, 50, 99}} {
		if got, err := r.WindowSenders(ctx, gid, ids); !errors.Is(err, ErrCorruptValue) {
			t.Errorf("WindowSenders(%v) of a member that is no message = %v, %v; want ErrCorruptValue", ids, got, err)
		}
	}
}
