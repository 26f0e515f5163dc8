package client

import (
	"context"
	"fmt"
	"slices"
	"testing"

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
