package client

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// A user in many groups, a message arriving in each, owes an ack of every
// group at once. A gateway allows a connection 200 frames a second, bursts
// of 400, and refuses the frames over it as rate_limited, whatever they
// are: one ack frame per group written all at once had some 200 of 600
// refused, and the user's own sends with them. The client keeps its acks,
// reads and pulls under the gateway's rate, so that every ack and send
// passes.
func TestAUserInManyGroupsAcksWithinTheGatewaysFrameRate(t *testing.T) {
	const n = 600
	groups := map[string][]string{}
	for i := range n {
		groups[fmt.Sprint("g", i)] = []string{"alice", "bob"}
	}
	p := newPeer(t, groups)
	p.set(func(p *peer) { p.frameRate, p.frameBurst = 200, 400 }) // a gateway's defaults
	c, rec := dial(t, p, "alice", func(c *Config) { c.AckInterval = 200 * time.Millisecond })
	for i := range n {
		p.post(fmt.Sprint("g", i), "bob", "hi")
	}
	waitFor(t, "every group's message", func() bool { return rec.len() == n })
	sent := make(chan error, 1)
	go func() {
		// The user writes meanwhile, as the acks go out.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 10 {
			if _, err := c.Send(ctx, "g0", fmt.Sprint("reply ", i)); err != nil {
				sent <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		sent <- nil
	}()
	deadline := time.Now().Add(20 * time.Second)
	for acked := 0; acked < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d groups acked after 20 s", acked, n)
		}
		time.Sleep(20 * time.Millisecond)
		acked = 0
		for i := range n {
			if a, _ := c.Cursor(fmt.Sprint("g", i)); a >= 0 {
				acked++
			}
		}
	}
	if err := <-sent; err != nil {
		t.Fatalf("Send: %v", err)
	}
	p.mu.Lock()
	limited := p.limited
	p.mu.Unlock()
	if len(limited) > 0 {
		counts := map[string]int{}
		for _, op := range limited {
			counts[op]++
		}
		t.Fatalf("%d frames refused as %s, by op: %v; want none", len(limited), protocol.CodeRateLimited, counts)
	}
}

// Acks the gateway refuses as over its frame rate (the user's sends, or
// another client on the connection, used it up) go to OnError as one
// error, once until an ack is accepted: not one per group and round.
func TestAcksRefusedAsRateLimitedAreReportedOnce(t *testing.T) {
	const n = 50
	groups := map[string][]string{}
	for i := range n {
		groups[fmt.Sprint("g", i)] = []string{"alice", "bob"}
	}
	p := newPeer(t, groups)
	var errs errLog
	c, rec := dial(t, p, "alice", func(c *Config) { c.OnError = errs.on })
	p.set(func(p *peer) { p.frameRate, p.frameBurst = 1e-9, 0 }) // every frame refused from now on
	for i := range n {
		p.post(fmt.Sprint("g", i), "bob", "hi")
	}
	waitFor(t, "every group's message", func() bool { return rec.len() == n })
	waitFor(t, "the acks refused", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.limited) >= n
	})
	time.Sleep(500 * time.Millisecond) // ten AckIntervals: the refused acks are sent again
	var reported []error
	for _, err := range errs.all() {
		if strings.Contains(err.Error(), string(protocol.CodeRateLimited)) {
			reported = append(reported, err)
		}
	}
	if len(reported) != 1 || strings.Count(reported[0].Error(), string(protocol.CodeRateLimited)) != 1 {
		t.Fatalf("acks refused as rate_limited reported in %d errors, want one that says it once:\n%v", len(reported), reported)
	}
	t.Logf("OnError: %v", reported[0])
	_ = c
}

// A gateway charges a sync one frame more for each 100 groups it lists
// (protocol.SyncPer). A client in 5,000 groups that the server asks to sync
// again and again (a push route that breaks and mends, a presence lost)
// synced at once each time, 51 frames of the gateway's 200 a second each,
// and had its syncs, acks and pulls refused as rate_limited. Its syncs take
// from the client's own budget of frames what they cost, so that none is
// refused, and leave its acks room: the messages of the time are acked
// while the syncs go on.
func TestSyncsOfAUserInThousandsOfGroupsKeepToTheGatewaysFrameRate(t *testing.T) {
	const n, msgs = 5000, 100
	p := newPeer(t, manyGroups(n))
	p.set(func(p *peer) { p.frameRate, p.frameBurst = 200, 400 }) // a gateway's defaults
	c, rec := dial(t, p, "alice", nil)
	refused := func() (int, map[string]int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		counts := map[string]int{}
		for _, op := range p.limited {
			counts[op]++
		}
		return len(p.limited), counts
	}
	acked := func() bool {
		for i := range msgs {
			if a, _ := c.Cursor(fmt.Sprint("g", i*37%n)); a < 0 {
				return false
			}
		}
		return true
	}
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Second || !acked(); i++ {
		if time.Since(start) > 10*time.Second {
			limited, counts := refused()
			t.Fatalf("%d of %d messages delivered, not every one acked after 10 s of syncs (%d made); %d frames refused as %s, by op: %v",
				rec.len(), msgs, len(p.requests(protocol.OpSync)), limited, protocol.CodeRateLimited, counts)
		}
		p.resync("alice") // pushes may have been lost: sync again
		if i < msgs {
			p.post(fmt.Sprint("g", i*37%n), "bob", "hi")
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	if got := rec.len(); got != msgs {
		t.Errorf("%d messages delivered, want %d", got, msgs)
	}
	syncs := len(p.requests(protocol.OpSync))
	limited, counts := refused()
	t.Logf("%d syncs of %d groups in %v, %d frames refused as %s %v", syncs, n, took.Round(time.Millisecond), limited, protocol.CodeRateLimited, counts)
	if limited > 0 {
		t.Errorf("%d frames refused as %s, by op: %v; want none", limited, protocol.CodeRateLimited, counts)
	}
	if syncs < 3 {
		t.Errorf("%d syncs in 3 s of resync frames; want the client to sync again as asked", syncs)
	}
}

// A who_read answer costs a frame of the gateway's rate more for each 500
// ids it lists (protocol.WhoReadPer): the client's budget of frames pays
// for it too, so that its acks, reads and pulls after it keep to the rate.
func TestAWhoReadOfAGroupOfThousandsTakesWhatItCostsFromTheBudget(t *testing.T) {
	members := []string{"alice", "bob"}
	for i := range 1998 {
		members = append(members, fmt.Sprint("u", i))
	}
	p := newPeer(t, map[string][]string{"big": members})
	p.set(func(p *peer) { p.whoRead = true })
	// A budget that does not grow back within the test: what is taken shows.
	c, _ := dial(t, p, "alice", func(c *Config) { c.FrameRate, c.FrameBurst = 1e-6, 100 })
	m := p.post("big", "bob", "hi all")
	waitFor(t, "the message acked", func() bool { a, _ := c.Cursor("big"); return a == m.MsgID })
	before := c.frames.avail() // nothing else of the client's is due
	read, unread, err := c.WhoRead(context.Background(), "big", m.MsgID)
	if err != nil {
		t.Fatal(err)
	}
	listed := len(read) + len(unread)
	if got, want := before-c.frames.avail(), listed/protocol.WhoReadPer; got != want {
		t.Errorf("a who_read listing %d ids took %d frames of the budget; want %d", listed, got, want)
	}
}

// A new connection's frames are counted anew by the gateway, so the cost of
// the syncs of the connections before is not owed to it: a client in 5,000
// groups whose connection was cut 20 times in a row (51 frames a sync) owed
// its budget some 800 frames, 8 s of its acks and pulls, when the gateway
// owed it none.
func TestSyncsOfConnectionsCutInARowAreNotOwedByTheNext(t *testing.T) {
	const n, cuts = 5000, 20
	p := newPeer(t, manyGroups(n))
	c, _ := dial(t, p, "alice", nil)
	for i := range cuts {
		p.kill()
		waitFor(t, "the reconnect", func() bool { return c.Stats().Reconnects == int64(i+1) })
	}
	m := p.post("g1", "bob", "after the cuts")
	start := time.Now()
	for a, _ := c.Cursor("g1"); a != m.MsgID; a, _ = c.Cursor("g1") {
		if time.Since(start) > 15*time.Second {
			t.Fatal("the message is not acked 15 s after it came")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the message was acked %v after it came, behind the syncs of %d connections cut in a row; want within 2 s", took.Round(time.Millisecond), cuts)
	}
}
