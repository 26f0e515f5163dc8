package client

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// A sync that does not name a group the client has delivered and acked (a
// server fault, or a sync answered from a member projection being rebuilt)
// makes the client forget the group. Pushed again, the group was made at
// the member's start and its gap's pull handed OnMessage what it had
// already been handed; named again by a sync whose ack cursor lags (the
// rebuild not yet past it), the same. Either way it starts where it was.
func TestAForgottenGroupTakenUpAgainDeliversNothingTwice(t *testing.T) {
	for _, how := range []string{"pushed", "named with an ack cursor behind"} {
		t.Run(how, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"alice", "bob"}})
			c, rec := dial(t, p, "alice", func(c *Config) { c.AckEvery = 1 })
			m1 := p.post("g1", "bob", "one")
			waitFor(t, "g1's first message acked", func() bool { a, _ := c.Cursor("g1"); return a == m1.MsgID })

			// One sync answer that names g2 only.
			p.set(func(p *peer) {
				p.syncGroups = `[{"gid":"g2","head":-1,"ack":-1,"read":-1,"unread":0,"unread_exact":true}]`
			})
			p.resync("alice")
			waitFor(t, "g1 forgotten", func() bool { a, ct := c.Cursor("g1"); return a == -1 && ct == -1 })
			if how == "pushed" {
				p.set(func(p *peer) { p.syncGroups = "" })
			} else {
				p.set(func(p *peer) {
					p.syncGroups = `[{"gid":"g1","head":0,"ack":-1,"read":-1,"unread":1,"unread_exact":true},` +
						`{"gid":"g2","head":-1,"ack":-1,"read":-1,"unread":0,"unread_exact":true}]`
				})
				p.resync("alice")
				waitFor(t, "g1 named again", func() bool {
					return slices.ContainsFunc(c.Groups(), func(g protocol.GroupState) bool { return g.Gid == "g1" })
				})
				p.set(func(p *peer) { p.syncGroups = "" })
			}
			p.post("g1", "bob", "two")
			waitFor(t, "two", func() bool { return slices.Contains(rec.bodies("g1"), "two") })
			time.Sleep(100 * time.Millisecond)
			if got := rec.bodies("g1"); !slices.Equal(got, []string{"one", "two"}) {
				t.Fatalf("g1 delivered %q, want [one two]: \"one\" handed to OnMessage twice", got)
			}
		})
	}
}

// The client keeps where the last maxForgotten groups it forgot were, the
// oldest let go first: any one was let go before, however recent.
func TestTheOldestForgottenGroupIsLetGoFirst(t *testing.T) {
	c := &Client{groups: map[string]*group{}}
	forget := func(gid string, delivered int64) {
		g := newGroup(gid, delivered)
		c.groups[gid] = g
		c.dropLocked(g)
	}
	for i := range maxForgotten {
		forget(fmt.Sprintf("g%d", i), int64(i))
	}
	c.remadeLocked("g1", -1) // taken up again
	forget("g1", 7)          // and forgotten again: now the newest
	forget("new", 3)
	if len(c.forgotten) != maxForgotten {
		t.Fatalf("%d groups remembered, want %d", len(c.forgotten), maxForgotten)
	}
	for gid, want := range map[string]bool{"g0": false, "g1": true, "g2": true, "new": true, fmt.Sprintf("g%d", maxForgotten-1): true} {
		if _, ok := c.forgotten[gid]; ok != want {
			t.Errorf("%s remembered %v, want %v", gid, ok, want)
		}
	}
	forget("newer", 4) // lets g2 go: g1 was forgotten again after it
	if _, ok := c.forgotten["g2"]; ok {
		t.Errorf("g2 still remembered, after g0 the oldest")
	}
	if f := c.forgotten["g1"]; f.delivered != 7 {
		t.Errorf("g1 remembered at %d, want 7, where it was forgotten last", f.delivered)
	}
	if g := c.remadeLocked("g1", 2); g.contig != 7 {
		t.Errorf("g1 taken up at %d, want 7", g.contig)
	}
}
