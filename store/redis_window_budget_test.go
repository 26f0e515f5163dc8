package store

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// A read with a byte budget sized its next read by the average of the
// members it had read: 32 messages of one byte, then messages of 16 KiB,
// made it read the next 968 at once, 15 MiB out of Redis for a page of
// 1 MiB, both ways. Each read takes at most twice as many members as the
// one before, so what it reads past the budget is at most one read.
func TestAWindowReadOfTinyThenLargeMessagesStaysNearItsBudget(t *testing.T) {
	c := newServerClient(t, testserver.NewRedis(t))
	r := newTestRedis(t, c, RedisConfig{WindowSize: -1})
	ctx := context.Background()
	big := []byte(strings.Repeat("x", 16<<10))
	// In g1 the oldest 32 are tiny, in g2 the newest 32: what a read after
	// the start and a read before the end take first.
	var msgs []schema.Message
	for gid, tiny := range map[string]func(i int) bool{
		"g1": func(i int) bool { return i < 32 },
		"g2": func(i int) bool { return i >= 968 },
	} {
		for i, m := range batchOf(gid, span(0, 999)...) {
			m.Body = big
			if tiny(i) {
				m.Body = []byte("a")
			}
			msgs = append(msgs, m)
		}
	}
	appendAll(t, r, msgs...)
	const budget = 1 << 20
	for _, dir := range []string{"after", "before"} {
		before := redisSent(t, c)
		var wr WindowRange
		var err error
		if dir == "after" {
			wr, err = r.Window(ctx, "g1", -1, 1001, budget)
		} else {
			wr, err = r.WindowBefore(ctx, "g2", -1, 1000, 1001, budget)
		}
		if err != nil {
			t.Fatal(err)
		}
		read := redisSent(t, c) - before
		if n := len(wr.Messages); n <= 32 || n > 32+budget/len(big) || !wr.Cut || read > 2*budget {
			t.Errorf("a read %s of 32 tiny messages and 968 of 16 KiB with a budget of %d KiB: %d messages, cut %v, %d KiB read from Redis; want 33 to %d, cut, at most %d KiB read",
				dir, budget>>10, n, wr.Cut, read>>10, 32+budget/len(big), 2*budget>>10)
		}
	}
}

// tinyThenLarge appends to gid's window n messages of one byte, then
// 1,000-n of 16 KiB.
func tinyThenLarge(t *testing.T, r *Redis, gid string, n int) {
	t.Helper()
	big := []byte(strings.Repeat("x", 16<<10))
	msgs := batchOf(gid, span(0, 999)...)
	for i := range msgs {
		msgs[i].Body = big
		if i < n {
			msgs[i].Body = []byte("a")
		}
	}
	appendAll(t, r, msgs...)
}

// Reads whose chunks at most double still let many small messages first
// make the last read large: 480 of one byte (32+64+128+256) then messages
// of 16 KiB made a read take 512 of those, 8 MiB, for a budget of 1 MiB.
// The window's size record tells a read the largest member it may meet:
// it copies at most one member past its budget. A window written before
// the record (none) reads as before.
func TestAWindowReadCopiesAtMostOneMemberPastItsBudget(t *testing.T) {
	c := newServerClient(t, testserver.NewRedis(t))
	r := newTestRedis(t, c, RedisConfig{WindowSize: -1})
	ctx := context.Background()
	tinyThenLarge(t, r, "g1", 480)
	tinyThenLarge(t, r, "old", 480)
	if err := c.Del(ctx, sizeKey("old")).Err(); err != nil {
		t.Fatal(err)
	}
	const budget = 1 << 20
	member := 8 + 16<<10 + 32 // a 16 KiB message, as the window holds it
	for gid, most := range map[string]int{"g1": budget + member, "old": budget + 512*member} {
		before := redisSent(t, c)
		wr, err := r.Window(ctx, gid, -1, 1001, budget)
		if err != nil {
			t.Fatal(err)
		}
		read := redisSent(t, c) - before
		if n := len(wr.Messages); n <= 480 || !wr.Cut || read > int64(most) {
			t.Errorf("%s: a read of 480 tiny messages and 520 of 16 KiB with a budget of %d KiB: %d messages, cut %v, %d KiB read from Redis; want more than 480, cut, at most %d KiB read",
				gid, budget>>10, n, wr.Cut, read>>10, most>>10)
		}
	}
}

// A page of small messages is read in two transactions, as before chunks
// were bounded: chunks that at most double took six for a page of 1,000
// messages of 200 bytes, and BenchmarkPull50k/window 55% longer. The size
// record shows their largest member is small.
func TestAPageOfSmallMessagesIsReadInTwoTransactions(t *testing.T) {
	c := newServerClient(t, testserver.NewRedis(t))
	r := newTestRedis(t, c, RedisConfig{WindowSize: -1})
	ctx := context.Background()
	msgs := batchOf("g1", span(0, 999)...)
	for i := range msgs {
		msgs[i].Body = make([]byte, 200)
	}
	appendAll(t, r, msgs...)
	multis := func() int {
		t.Helper()
		v, err := testserver.RedisInfo(ctx, c, "commandstats", "cmdstat_multi")
		if err != nil {
			t.Fatal(err)
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		n, _ := strconv.Atoi(calls)
		return n
	}
	before := multis()
	wr, err := r.Window(ctx, "g1", -1, 1001, 1<<20)
	if err != nil || len(wr.Messages) != 1000 || wr.Cut {
		t.Fatalf("Window = %d messages, cut %v, %v; want all 1,000", len(wr.Messages), wr.Cut, err)
	}
	if n := multis() - before; n > 2 {
		t.Errorf("a page of 1,000 messages of 200 bytes took %d transactions; want 2", n)
	}
}
