package store

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// TestClickHouseMessagesBefore pages up through a group whose msgids
// interleave with another's, with every message inserted twice (a replay).
func TestClickHouseMessagesBefore(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	g1 := testMessages("g1", 0, 2, 25) // msgids 0, 2, ..., 48
	g2 := testMessages("g2", 1, 2, 25)
	stopMerges(t, c, "messages")
	for range 2 {
		if err := c.InsertMessages(ctx, 3, append(slices.Clone(g1), g2...)); err != nil {
			t.Fatalf("InsertMessages: %v", err)
		}
	}
	var got []schema.Message
	before := int64(1000)
	for page := 0; ; page++ {
		msgs, err := c.MessagesBefore(ctx, "g1", -1, before, 10)
		if err != nil {
			t.Fatalf("MessagesBefore(before %d): %v", before, err)
		}
		if len(msgs) == 0 {
			break
		}
		if want := min(10, len(g1)-len(got)); len(msgs) != want {
			t.Fatalf("page %d: %d messages %v, want %d", page, len(msgs), msgids(msgs), want)
		}
		got = append(slices.Clone(msgs), got...)
		before = msgs[0].MsgID
	}
	if len(got) != len(g1) {
		t.Fatalf("paged %d messages, want %d", len(got), len(g1))
	}
	for i := range g1 {
		if !equalMessage(got[i], g1[i]) {
			t.Errorf("message %d: got %+v, want %+v", i, got[i], g1[i])
		}
	}
	for _, tc := range []struct {
		after, before int64
		want          []int64
	}{
		{-1, 9, []int64{4, 6, 8}}, // the newest three below 9
		{4, 9, []int64{6, 8}},     // never at or below after
		{5, 6, nil},
		{-1, 0, nil},
	} {
		msgs, err := c.MessagesBefore(ctx, "g1", tc.after, tc.before, 3)
		if err != nil || !slices.Equal(msgids(msgs), tc.want) {
			t.Errorf("MessagesBefore(after %d, before %d, 3) = %v, %v; want %v", tc.after, tc.before, msgids(msgs), err, tc.want)
		}
	}
	if _, err := c.MessagesBefore(ctx, "g1", -1, 10, 0); err == nil {
		t.Error("MessagesBefore with limit 0: no error")
	}
}

// TestClickHouseMessagesCopiesInPage pages both ways through a group whose
// older messages were inserted three times and newer ones once: copies
// must not shorten a page or reorder it.
func TestClickHouseMessagesCopiesInPage(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	g := testMessages("g", 0, 1, 40)
	stopMerges(t, c, "messages")
	for _, run := range [][]schema.Message{g[:25], g, g[:25]} {
		if err := c.InsertMessages(ctx, 0, run); err != nil {
			t.Fatalf("InsertMessages: %v", err)
		}
	}
	for _, limit := range []int{1, 7, 30, 40, 41} {
		var up, down []schema.Message
		for after := int64(-1); ; {
			msgs, err := c.Messages(ctx, "g", after, 39, limit)
			if err != nil {
				t.Fatalf("Messages(after %d, limit %d): %v", after, limit, err)
			}
			if want := min(limit, len(g)-len(up)); len(msgs) != want {
				t.Fatalf("Messages(after %d, limit %d): %v, want %d", after, limit, msgids(msgs), want)
			}
			if len(msgs) == 0 {
				break
			}
			up, after = append(up, msgs...), msgs[len(msgs)-1].MsgID
		}
		for before := int64(40); ; {
			msgs, err := c.MessagesBefore(ctx, "g", -1, before, limit)
			if err != nil {
				t.Fatalf("MessagesBefore(before %d, limit %d): %v", before, limit, err)
			}
			if want := min(limit, len(g)-len(down)); len(msgs) != want {
				t.Fatalf("MessagesBefore(before %d, limit %d): %v, want %d", before, limit, msgids(msgs), want)
			}
			if len(msgs) == 0 {
				break
			}
			down, before = append(slices.Clone(msgs), down...), msgs[0].MsgID
		}
		for i := range g {
			if !equalMessage(up[i], g[i]) || !equalMessage(down[i], g[i]) {
				t.Fatalf("limit %d, message %d: up %+v, down %+v, want %+v", limit, i, up[i], down[i], g[i])
			}
		}
	}
}

// A replay's batch may meet ten thousand groups new to Redis, whose floors
// NewestBefore looks up at once: as one query of their longest ids it
// passed ClickHouse's max_query_size, and the persister retried the batch
// for ever.
func TestClickHouseNewestBeforeOfManyLongGroupIDs(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	pad := strings.Repeat("x", schema.MaxIDLen-8)
	gids := make([]string, 10_000)
	for i := range gids {
		gids[i] = fmt.Sprintf("%s%08d", pad, i)
	}
	if err := c.InsertMessages(ctx, 0, append(testMessages(gids[1], 5, 1, 2), testMessages(gids[9_999], 7, 1, 1)...)); err != nil {
		t.Fatal(err)
	}
	got, err := c.NewestBefore(ctx, gids, 100)
	if err != nil {
		t.Fatalf("NewestBefore of %d groups of %d bytes: %v", len(gids), len(gids[0]), err)
	}
	if want := map[string]int64{gids[1]: 6, gids[9_999]: 7}; !maps.Equal(got, want) {
		t.Errorf("NewestBefore = %v; want %v", got, want)
	}
}
