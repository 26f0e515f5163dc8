package store

import (
	"bytes"
	"slices"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// TestClickHouseMessagesWithinABudget pages both ways through a group of
// small and large messages, the older ones inserted three times, with a
// byte budget: every page must be the run a byte count gives (one message
// at least, the next one would pass the budget), say whether it was cut,
// and hold the bodies of the large messages too, which the page's first
// query leaves out.
func TestClickHouseMessagesWithinABudget(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	g := testMessages("g", 0, 1, 40)
	for i := range g {
		if i%5 == 0 {
			g[i].Body = bytes.Repeat([]byte{'a' + byte(i%26)}, 3000)
		}
	}
	g[10].Body = bytes.Repeat([]byte("z"), 9000) // over the budget alone
	stopMerges(t, c, "messages")
	for _, run := range [][]schema.Message{g[:25], g, g[:25]} {
		if err := c.InsertMessages(ctx, 0, run); err != nil {
			t.Fatalf("InsertMessages: %v", err)
		}
	}
	const budget = 4000
	// want is the page of rest (in the order a page fills) a byte count
	// gives, and whether it is cut.
	want := func(rest []schema.Message, limit int) (int, bool) {
		n, size := 0, 0
		for n < min(limit, len(rest)) {
			if size += len(rest[n].Body); n > 0 && size > budget {
				return n, true
			}
			n++
		}
		return n, false
	}
	for _, limit := range []int{1, 3, 7, 40, 41} {
		for after := int64(-1); ; {
			msgs, cut, err := c.MessagesWithin(ctx, "g", after, 39, limit, budget)
			if err != nil {
				t.Fatalf("MessagesWithin(after %d, limit %d): %v", after, limit, err)
			}
			rest := g[after+1:]
			n, wcut := want(rest, limit)
			if !slices.EqualFunc(msgs, rest[:n], equalMessage) || cut != wcut {
				t.Fatalf("MessagesWithin(after %d, limit %d) = %v, cut %v; want %v, cut %v",
					after, limit, msgids(msgs), cut, msgids(rest[:n]), wcut)
			}
			if len(msgs) == 0 {
				break
			}
			after = msgs[len(msgs)-1].MsgID
		}
		for before := int64(40); ; {
			msgs, cut, err := c.MessagesBeforeWithin(ctx, "g", -1, before, limit, budget)
			if err != nil {
				t.Fatalf("MessagesBeforeWithin(before %d, limit %d): %v", before, limit, err)
			}
			rest := slices.Clone(g[:before])
			slices.Reverse(rest)
			n, wcut := want(rest, limit)
			rest = rest[:n]
			slices.Reverse(rest)
			if !slices.EqualFunc(msgs, rest, equalMessage) || cut != wcut {
				t.Fatalf("MessagesBeforeWithin(before %d, limit %d) = %v, cut %v; want %v, cut %v",
					before, limit, msgids(msgs), cut, msgids(rest), wcut)
			}
			if len(msgs) == 0 {
				break
			}
			before = msgs[0].MsgID
		}
	}
}
