package history

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// pullUp pages gid from its newest message down to after, as a client
// scrolling up does, and returns the msgids in ascending order.
func pullUp(t *testing.T, h *History, gid string, after int64, page int) ([]int64, map[Source]int) {
	t.Helper()
	sources := map[Source]int{}
	var got []int64
	before := int64(1 << 50)
	for {
		p, err := h.PullBefore(context.Background(), gid, after, before, page)
		if err != nil {
			t.Fatalf("PullBefore(%s, after %d, before %d): %v", gid, after, before, err)
		}
		if len(p.Messages) > page {
			t.Fatalf("page of %d messages, limit %d", len(p.Messages), page)
		}
		sources[p.Source]++
		ids := make([]int64, 0, len(p.Messages))
		for _, m := range p.Messages {
			if m.MsgID <= after || m.MsgID >= before || len(ids) > 0 && m.MsgID <= ids[len(ids)-1] {
				t.Fatalf("msgid %d out of place in a page before %d after %d", m.MsgID, before, after)
			}
			ids = append(ids, m.MsgID)
		}
		got = append(ids, got...)
		if !p.More {
			return got, sources
		}
		if len(ids) == 0 {
			t.Fatalf("a page before %d says more but brings nothing", before)
		}
		before = ids[0]
	}
}

func TestPullBeforeCrossesFromWindowToClickHouse(t *testing.T) {
	f := newFixture(t, 100, true)
	ids := f.seed(t, 3, 450, 10)
	h, err := New(Config{Redis: f.redis, ClickHouse: f.ch})
	if err != nil {
		t.Fatal(err)
	}
	want := ids["g1"]
	got, sources := pullUp(t, h, "g1", -1, 64)
	if !slices.Equal(got, want) {
		t.Fatalf("paging up g1 gave %d messages, want %d in order", len(got), len(want))
	}
	if sources[FromWindow] == 0 || sources[FromClickHouse] == 0 {
		t.Fatalf("pages came from %v, want both the window and ClickHouse", sources)
	}
	// A member who joined at want[99] sees nothing at or before it.
	got, _ = pullUp(t, h, "g1", want[99], 64)
	if !slices.Equal(got, want[100:]) {
		t.Fatalf("paging up from a join position gave %d messages, want %d", len(got), len(want)-100)
	}
	// The page right before a msgid ends right before it.
	p, err := h.PullBefore(context.Background(), "g1", -1, want[10], 4)
	if err != nil || len(p.Messages) != 4 || p.Messages[3].MsgID != want[9] || p.Messages[0].MsgID != want[6] || !p.More {
		t.Fatalf("PullBefore(before %d, 4) = %+v, %v; want %v with more", want[10], p, err, want[6:10])
	}
	if p.Head != want[len(want)-1] {
		t.Fatalf("head %d, want %d", p.Head, want[len(want)-1])
	}
	if p, err := h.PullBefore(context.Background(), "g1", -1, want[0], 4); err != nil || len(p.Messages) != 0 || p.More {
		t.Fatalf("PullBefore the first message = %+v, %v; want an empty last page", p, err)
	}
}

func TestPullBeforeWithoutClickHouse(t *testing.T) {
	f := newFixture(t, 10, false)
	ids := f.seed(t, 1, 30, 1)["g0"]
	h, _ := New(Config{Redis: f.redis})
	p, err := h.PullBefore(context.Background(), "g0", -1, 1<<50, 5)
	if err != nil || len(p.Messages) != 5 || p.Messages[4].MsgID != ids[29] || !p.More {
		t.Fatalf("the newest page: %+v, %v", p, err)
	}
	// The window holds the newest of the range: they come, with more.
	if p, err := h.PullBefore(context.Background(), "g0", -1, ids[25], 5); err != nil || len(p.Messages) != 5 ||
		p.Messages[0].MsgID != ids[20] || !p.More {
		t.Fatalf("a page reaching the window's floor: %+v, %v; want %v with more", p, err, ids[20:25])
	}
	if _, err := h.PullBefore(context.Background(), "g0", -1, ids[20], 5); !errors.Is(err, ErrNoHistory) {
		t.Fatalf("a page below the window without ClickHouse: %v, want ErrNoHistory", err)
	}
	if p, err := h.PullBefore(context.Background(), "nobody", -1, 10, 5); err != nil || len(p.Messages) != 0 || p.More || p.Head != -1 {
		t.Fatalf("an empty group: %+v %v", p, err)
	}
}
