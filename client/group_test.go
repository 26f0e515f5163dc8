package client

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// A pull that stopped for a full queue goes on as OnMessage drains it; if
// the server refuses it for a while (unavailable...), it is pulled again
// after a back-off, not given up.
func TestAPullResumedAfterAFullQueueIsPulledAgainWhenRefused(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	var want []string
	for i := range 100 {
		p.post("g1", "bob", fmt.Sprint(i))
		want = append(want, fmt.Sprint(i))
	}
	release := make(chan struct{})
	c, rec := dial(t, p, "alice", func(cfg *Config) {
		cfg.PageSize, cfg.MaxQueued = 10, 20
		on := cfg.OnMessage
		cfg.OnMessage = func(m protocol.Message) {
			<-release
			on(m)
		}
	})
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatal(err)
	}
	p.set(func(p *peer) { p.refusePulls, p.pullRefusal = 2, protocol.CodeUnavailable })
	close(release)
	waitFor(t, "every message", func() bool { return rec.len() == 100 })
	if got := rec.bodies("g1"); !slices.Equal(got, want) {
		t.Fatalf("%d messages delivered, not the 100 in order", len(got))
	}
}

// Open blocks until it succeeds, fails for good or its ctx ends. A pull the
// server refuses for a while (unavailable...) is made again after a
// back-off: Open returns once the messages are queued, not with the first
// refusal, which leaves the group unpulled until the next reconnect.
func TestOpenPullsAgainWhenRefusedForAWhile(t *testing.T) {
	for _, code := range []protocol.Code{protocol.CodeUnavailable, protocol.CodeInternal, protocol.CodeRateLimited} {
		t.Run(string(code), func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
			c, rec := dial(t, p, "alice", nil)
			p.set(func(p *peer) { p.dropPush = func(protocol.Message) bool { return true } }) // Open brings them
			for i := range 3 {
				p.post("g1", "bob", fmt.Sprint(i))
			}
			p.set(func(p *peer) { p.refusePulls, p.pullRefusal = 2, code })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.Open(ctx, "g1"); err != nil {
				t.Fatalf("Open refused twice with %s, then answered: %v", code, err)
			}
			waitFor(t, "the 3 messages", func() bool { return rec.len() == 3 })
			if n := len(p.requests(protocol.OpPull)); n != 3 {
				t.Fatalf("%d pulls, want 3: two refused, one answered", n)
			}
		})
	}
}
