package store

import (
	"context"
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
