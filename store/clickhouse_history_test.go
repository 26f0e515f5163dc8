package store

import (
	"slices"
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
