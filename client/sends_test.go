package client

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
)

// A sender who uses a client_msg_id again past the server's dedup window
// (24 h by sent_at) makes a new message, which the server stores and
// pushes: the client took it for a second record of the first, whatever
// their sent_at, hid it from the application and acked past it. A second
// record within the window is still hidden.
func TestACmidUsedAgainPastTheDedupWindowIsANewMessage(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	send := func(cmid, body string, sentAt int64) protocol.Message {
		p.pushMu.Lock()
		defer p.pushMu.Unlock()
		p.mu.Lock()
		p.appendLocked("g1", "bob", body, cmid)
		msgs := p.groups["g1"].msgs
		msgs[len(msgs)-1].SentAt = sentAt
		m := msgs[len(msgs)-1]
		p.mu.Unlock()
		p.push(m)
		return m
	}
	day := (24 * time.Hour).Milliseconds()
	t0 := time.Now().UnixMilli()
	send("alert-disk", "disk full on db1", t0)
	send("alert-disk", "disk full on db1", t0+day) // a second record, at the window's edge
	send("alert-disk", "disk full on db1, the next day", t0+day+1)
	send("alert-disk", "disk full on db1, the next day", t0+day+2) // a second record of that one
	got := rec.bodiesAfter(t, p, "g1", "later")
	if want := []string{"disk full on db1", "disk full on db1, the next day", "later"}; !slices.Equal(got, want) {
		t.Fatalf("handed %q, want %q", got, want)
	}
	if s := c.Stats(); s.Duplicates != 2 {
		t.Errorf("Stats().Duplicates = %d, want 2", s.Duplicates)
	}
}

// The client decides that two records are one send as the server does:
// sameSend is store.SameSend, which the persister and the fan-out use.
func TestTheClientTellsOneSendAsTheServerDoes(t *testing.T) {
	day := (24 * time.Hour).Milliseconds()
	values := []int64{0, 1, -1, day, day + 1, -day, -day - 1, 1763700000000, 1763700000000 + day, 1763700000000 + day + 1,
		1 << 53, 1<<53 + 1, 1<<53 - 1, -1 << 53, -1<<53 - 1, -1<<53 + 1, 1 << 62, -1 << 62, math.MaxInt64, math.MinInt64}
	for _, win := range []int64{1, 1000, day} {
		for _, a := range values {
			for _, b := range values {
				if got, want := sameSend(a, b, win), store.SameSend(a, b, win); got != want {
					t.Errorf("sameSend(%d, %d, %d) = %v, store.SameSend says %v", a, b, win, got, want)
				}
			}
		}
	}
}
