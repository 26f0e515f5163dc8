package store

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A position set back by hand keeps what lay below the one it had, and one
// set forward the records it skipped, which were never handled: a replay
// of them must be handled as new (their corrections appended), not taken
// for a replay of what was handled before.
func TestResetOffsetsKeepWhatWasHandledAndWhatWasSkipped(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	const g, topic = "chat.receipt-projector", "chat.receipts"
	set := func(reset bool, off int64) {
		t.Helper()
		save := r.SaveOffsets
		if reset {
			save = r.ResetOffsets
		}
		if err := save(ctx, g, topic, map[int]int64{0: off}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, spans map[[2]int64]bool) {
		t.Helper()
		h, err := r.Handled(ctx, g, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		for s, want := range spans {
			if got := h.Covers(s[0], s[1]); got != want {
				t.Errorf("%s: %+v covers %d..%d = %v; want %v", when, h, s[0], s[1], got, want)
			}
		}
	}
	set(false, 500) // the projector's own progress
	check("never reset", map[[2]int64]bool{{0, 10}: false})
	set(true, 2000) // forward, past 500..1999
	set(false, 2100)
	set(true, 1000) // back
	check("forward then back", map[[2]int64]bool{{0, 499}: true, {1000, 1999}: false, {1990, 2010}: false, {2000, 2099}: true, {2050, 2100}: false})
	set(true, 3000) // forward again, past 1000..2999
	set(true, -2)   // back to the start
	check("forward twice, then back", map[[2]int64]bool{{0, 499}: true, {2000, 2099}: false, {2990, 2999}: false})
}
