package store

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// A window's size record holds the bytes of its largest member, through
// batches that add smaller ones, and through the step that raises a floor
// with the members (a batch larger than the window); a window that held
// members before its record began has none known until they are trimmed.
func testWindowSizeRecord(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 4})
	ctx := context.Background()
	known := func(gid string) int {
		t.Helper()
		rec, err := c.ZRangeWithScores(ctx, sizeKey(gid), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids := [2]int64{-1, -1} // floor, head
		for i, key := range []string{floorKey(gid), headKey(gid)} {
			id, ok, err := optionalMsgID(c.Get(ctx, key))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				ids[i] = id
			}
		}
		return largestMember(rec, ids[0], ids[1])
	}
	sized := func(gid string, body int, ids ...int64) []schema.Message {
		msgs := batchOf(gid, ids...)
		for i := range msgs {
			msgs[i].Body = make([]byte, body)
		}
		return msgs
	}
	largest := func(msgs []schema.Message) int {
		n := 0
		for _, m := range msgs {
			n = max(n, len(windowMember(m)))
		}
		return n
	}

	first := sized("g1", 10, 0, 1)
	appendAll(t, r, first...)
	if got := known("g1"); got != largest(first) {
		t.Fatalf("after a first batch of %d-byte members: largest %d", largest(first), got)
	}
	bigger := sized("g1", 1000, 2)
	appendAll(t, r, bigger...)
	appendAll(t, r, sized("g1", 10, 3, 4, 5)...)
	if got := known("g1"); got != largest(bigger) {
		t.Fatalf("after a member of %d bytes, then smaller ones: largest %d", largest(bigger), got)
	}
	huge := sized("g1", 2000, span(6, 15)...) // more than the window holds: one step with its floor
	appendAll(t, r, huge...)
	if got := known("g1"); got != largest(huge) {
		t.Fatalf("after a batch larger than the window, of %d-byte members: largest %d", largest(huge), got)
	}

	// A window from before the record: its members were never measured.
	appendAll(t, r, sized("old", 5000, 0, 1)...)
	if err := c.Del(ctx, sizeKey("old")).Err(); err != nil {
		t.Fatal(err)
	}
	appendAll(t, r, sized("old", 10, 2, 3)...)
	if got := known("old"); got != 0 {
		t.Fatalf("a window holding members from before its record: largest %d; want 0, not known", got)
	}
	later := sized("old", 10, 4, 5)
	appendAll(t, r, later...) // trims 0 and 1
	if got := known("old"); got != largest(later) {
		t.Fatalf("once the members from before the record are trimmed: largest %d; want %d", got, largest(later))
	}

	// A writer that keeps no record (a persister of a release before it,
	// during a rolling update) adds members the record never saw: the
	// record, as it was, no longer holds once the head passes its upto,
	// and the next batch begins it again.
	appendAll(t, r, sized("mixed", 10, 0, 1)...)
	before, err := c.ZRangeWithScores(ctx, sizeKey("mixed"), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, r, sized("mixed", 3000, 2, 3)...)
	if err := c.Del(ctx, sizeKey("mixed")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, sizeKey("mixed"), before...).Err(); err != nil {
		t.Fatal(err)
	}
	if got := known("mixed"); got != 0 {
		t.Fatalf("members of 3000 bytes added without the record, which says %d: largest %d; want 0, not known", largest(sized("mixed", 10, 0)), got)
	}
	appendAll(t, r, sized("mixed", 10, 4, 5)...)
	if got := known("mixed"); got != 0 {
		t.Fatalf("a batch after members the record never saw: largest %d; want 0 until they are trimmed", got)
	}
	last := sized("mixed", 10, 6, 7)
	appendAll(t, r, last...) // trims 2 and 3
	if got := known("mixed"); got != largest(last) {
		t.Fatalf("once the members the record never saw are trimmed: largest %d; want %d", got, largest(last))
	}
}
