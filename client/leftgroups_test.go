package client

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// A group the user left drops out of the sync once its messages from
// before the leave are acked and read (PROTOCOL.md, sync). The client then
// forgets it, and opening it again (its history up to the leave may still
// be pulled) hands OnMessage nothing twice; while it is open, the client
// keeps it whatever the sync names.
func TestAGroupLeftAndDroppedFromTheSyncIsForgottenWithoutRedelivery(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", func(c *Config) { c.AckEvery = 1 })
	p.post("g1", "bob", "one")
	m2 := p.post("g1", "bob", "two")
	waitFor(t, "g1 acked", func() bool { a, _ := c.Cursor("g1"); return a == m2.MsgID })
	g2 := `{"gid":"g2","head":-1,"ack":-1,"read":-1,"unread":0,"unread_exact":true}`

	// Left, read not yet: listed.
	p.set(func(p *peer) {
		p.syncGroups = fmt.Sprintf(`[{"gid":"g1","head":%d,"ack":%d,"read":-1,"unread":0,"unread_exact":false,"left":true},%s]`, m2.MsgID, m2.MsgID, g2)
	})
	p.resync("alice")
	waitFor(t, "g1 listed as left", func() bool {
		return slices.ContainsFunc(c.Groups(), func(g protocol.GroupState) bool { return g.Gid == "g1" && g.Left })
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.MarkRead(ctx, "g1", m2.MsgID); err != nil {
		t.Fatal(err)
	}
	// Read to the leave: dropped from the sync. The client keeps the group
	// while its read is not yet confirmed, and forgets it at the first
	// sync after.
	p.set(func(p *peer) { p.syncGroups = "[" + g2 + "]" })
	waitFor(t, "g1 forgotten", func() bool {
		p.resync("alice")
		time.Sleep(50 * time.Millisecond)
		a, ct := c.Cursor("g1")
		return a == -1 && ct == -1
	})

	if err := c.Open(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	if a, ct := c.Cursor("g1"); ct != m2.MsgID {
		t.Errorf("g1 opened again at %d/%d, want where it was forgotten, %d", a, ct, m2.MsgID)
	}
	p.resync("alice") // the sync still leaves g1 out: opened, it is kept
	time.Sleep(100 * time.Millisecond)
	if _, ct := c.Cursor("g1"); ct != m2.MsgID {
		t.Errorf("g1, open, dropped by a sync that does not name it: cursor %d", ct)
	}
	if got := rec.bodies("g1"); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("g1 delivered %q, want [one two] once each", got)
	}
}
