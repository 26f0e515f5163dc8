package store

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
)

func windowBefore(t *testing.T, r *Redis, gid string, after, before int64, limit int) ([]int64, bool) {
	t.Helper()
	wr, err := r.WindowBefore(context.Background(), gid, after, before, limit, 0)
	if err != nil {
		t.Fatalf("WindowBefore(%q, %d, %d, %d): %v", gid, after, before, limit, err)
	}
	// complete: the page is what the whole history gives (nothing of the
	// range trimmed, or a full page, all above the floor).
	return msgIDs(wr.Messages), after >= wr.Floor || len(wr.Messages) == limit
}

func testWindowBefore(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 5})
	appendAll(t, r, batchOf("g1", span(0, 9)...)...) // 0..4 trimmed: floor 4
	for _, tc := range []struct {
		after, before int64
		limit         int
		want          []int64
		complete      bool
	}{
		{-1, 10, 3, span(7, 9), true},   // the newest page
		{-1, 1000, 3, span(7, 9), true}, // before past the head
		{-1, 8, 3, span(5, 7), true},
		{-1, 7, 3, span(5, 6), false}, // the rest is below the floor
		{4, 7, 3, span(5, 6), true},   // ... unless the range ends at the floor
		{5, 9, 10, span(6, 8), true},
		{-1, 3, 3, nil, false},
		{6, 7, 3, nil, true}, // an empty range
		{7, 7, 3, nil, true},
	} {
		ids, complete := windowBefore(t, r, "g1", tc.after, tc.before, tc.limit)
		if !slicesEqual(ids, tc.want) || complete != tc.complete {
			t.Errorf("after %d before %d limit %d: %v complete=%v, want %v complete=%v",
				tc.after, tc.before, tc.limit, ids, complete, tc.want, tc.complete)
		}
	}
	if wr, err := r.WindowBefore(context.Background(), "g1", -1, 7, 3, 0); err != nil || wr.Floor != 4 || wr.Head != 9 {
		t.Errorf("floor and head = %d, %d, %v; want 4 and 9", wr.Floor, wr.Head, err)
	}
	if ids, complete := windowBefore(t, r, "nobody", -1, 10, 5); len(ids) != 0 || !complete {
		t.Errorf("unknown group: %v complete=%v, want nothing, complete", ids, complete)
	}
	if _, err := r.WindowBefore(context.Background(), "g1", -1, 10, 0, 0); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("limit 0: err = %v, want ErrInvalidLimit", err)
	}

	// Paging up through two interleaved groups visits every message once.
	r = newTestRedis(t, c, RedisConfig{WindowSize: -1})
	var g2 []int64
	for id := int64(100); id < 200; id++ {
		gid := "g3"
		if id%3 != 0 {
			gid = "g2"
			g2 = append(g2, id)
		}
		appendAll(t, r, msg(gid, "alice", "", id, t0+id))
	}
	var got []int64
	before := int64(1 << 40)
	for page := 0; ; page++ {
		ids, complete := windowBefore(t, r, "g2", -1, before, 7)
		if !complete {
			t.Fatalf("page %d: unbounded window not complete", page)
		}
		if len(ids) == 0 {
			break
		}
		got = append(ids, got...)
		before = ids[0]
	}
	if !slicesEqual(got, g2) {
		t.Errorf("pages joined = %v,\nwant every message of g2 in order %v", got, g2)
	}
}

// A read with a byte budget stops before the members would pass it, after
// one message at least, and says so (Cut); its chunks join without a gap
// or a repeat, both ways, whatever the limit and the budget.
func testWindowBytes(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	msgs := batchOf("g1", span(0, 199)...)
	for i := range msgs {
		msgs[i].Body = make([]byte, 100)
	}
	appendAll(t, r, msgs...)
	members, err := r.client.ZRange(ctx, windowKey("g1"), 0, -1).Result()
	if err != nil || len(members) != 200 {
		t.Fatal(len(members), err)
	}
	// fits returns how many of the members, taken in order, a read takes.
	fits := func(order []string, limit, budget int) (n int, cut bool) {
		total := 0
		for n < min(limit, len(order)) {
			if budget > 0 && n > 0 && total+len(order[n]) > budget {
				return n, true
			}
			total += len(order[n])
			n++
		}
		return n, false
	}
	newest := slices.Clone(members)
	slices.Reverse(newest)
	size := len(members[100])
	for _, tc := range []struct{ limit, budget int }{
		{200, 0}, {150, 0}, {150, 1 << 20}, {200, 50 * size}, {200, 50*size + size - 1},
		{40, 50 * size}, {200, 1}, {200, 200 * size}, {200, 37 * size},
	} {
		wr, err := r.Window(ctx, "g1", -1, tc.limit, tc.budget)
		if err != nil {
			t.Fatal(err)
		}
		n, cut := fits(members, tc.limit, tc.budget)
		if got := msgIDs(wr.Messages); !slicesEqual(got, span(0, int64(n)-1)) || wr.Cut != cut {
			t.Errorf("Window(limit %d, %d bytes) = %d messages %v..., cut %v; want 0..%d, cut %v",
				tc.limit, tc.budget, len(got), got[:min(3, len(got))], wr.Cut, n-1, cut)
		}
		wb, err := r.WindowBefore(ctx, "g1", -1, 200, tc.limit, tc.budget)
		if err != nil {
			t.Fatal(err)
		}
		n, cut = fits(newest, tc.limit, tc.budget)
		if got := msgIDs(wb.Messages); !slicesEqual(got, span(200-int64(n), 199)) || wb.Cut != cut {
			t.Errorf("WindowBefore(limit %d, %d bytes) = %d messages ...%v, cut %v; want %d..199, cut %v",
				tc.limit, tc.budget, len(got), got[max(0, len(got)-3):], wb.Cut, 200-n, cut)
		}
	}
}

// A read with a byte budget reads on after its first members in a second
// transaction; when the window was trimmed past them meanwhile, the range
// still starts right above its floor and has no hole: the history store
// serves what lies below.
func TestWindowBytesAcrossATrimHasNoHole(t *testing.T) {
	srv := testserver.NewRedis(t)
	ctx := context.Background()
	w := newTestRedis(t, newServerClient(t, srv), RedisConfig{WindowSize: 100})
	appendAll(t, w, batchOf("g1", span(0, 99)...)...)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	trimmed := false
	c.AddHook(&afterFirstPipeline{name: "zrange", then: func() {
		appendAll(t, w, batchOf("g1", span(100, 160)...)...) // window 61..160, floor 60
		trimmed = true
	}})
	r := newTestRedis(t, c, RedisConfig{WindowSize: 100})
	wr, err := r.Window(ctx, "g1", -1, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !trimmed {
		t.Fatal("the read ran no ZRANGE; the test no longer trims under it")
	}
	got := msgIDs(wr.Messages)
	if len(got) == 0 || !slicesEqual(got, span(wr.Floor+1, wr.Floor+int64(len(got)))) {
		t.Fatalf("Window across a trim = floor %d, %d messages %v; want a run from the floor up, with no hole", wr.Floor, len(got), got)
	}
}
