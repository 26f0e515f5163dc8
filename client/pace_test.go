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
