package store

import (
	"context"
	"strings"
	"testing"

	"github.com/groupchat/chatd/internal/testserver"
)

// During a rolling update a partition of chat.messages moves between
// persisters that keep the window's size record and persisters of a
// release before it. The older ones appended to the window without
// raising the record, which still claimed to cover it: a gateway sized its
// reads by a largest member far too small and copied many times its byte
// budget out of Redis per pull. The record now holds only up to the head
// it accounted for. The older persister is simulated exactly: the same
// window, floor and head writes, the record left as it was.
func TestAWindowWrittenByAnOlderPersisterIsReadWithinItsBudget(t *testing.T) {
	c := newServerClient(t, testserver.NewRedis(t))
	r := newTestRedis(t, c, RedisConfig{WindowSize: -1})
	ctx := context.Background()
	big := []byte(strings.Repeat("x", 16<<10))

	// A persister of this release writes the group's first 32 tiny messages:
	// the record begins (since 0), max = a tiny member.
	tiny := batchOf("g1", span(0, 31)...)
	for i := range tiny {
		tiny[i].Body = []byte("a")
	}
	appendAll(t, r, tiny...)
	saved, err := c.Dump(ctx, sizeKey("g1")).Result()
	if err != nil {
		t.Fatal(err)
	}

	// An older persister takes the partition over and writes 968 messages
	// of 16 KiB: it knows nothing of winsize.
	large := batchOf("g1", span(32, 999)...)
	for i := range large {
		large[i].Body = big
	}
	appendAll(t, r, large...)
	if err := c.RestoreReplace(ctx, sizeKey("g1"), 0, saved).Err(); err != nil {
		t.Fatal(err)
	}

	// A gateway of this release pulls with the usual 1 MiB budget.
	const budget = 1 << 20
	before := redisSent(t, c)
	wr, err := r.Window(ctx, "g1", -1, 1000, budget)
	if err != nil {
		t.Fatal(err)
	}
	read := redisSent(t, c) - before
	member := 8 + len(big) + 32
	if most := int64(budget + 2*member); read > most {
		t.Errorf("a pull of 32 tiny messages and 968 of 16 KiB (the large ones written by an older persister) with a budget of %d KiB: %d messages, cut %v, %d KiB read from Redis; want at most %d KiB (one member past the budget, as with one persister release)",
			budget>>10, len(wr.Messages), wr.Cut, read>>10, most>>10)
	}
}
