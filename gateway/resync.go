package gateway

import (
	"context"
	"encoding/json"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// resyncPace spreads the resync frames of a node's connections: at most
// resyncBurst connections are told each resyncTick, so that ten thousand
// clients do not sync at the same moment (10,000 a second).
const (
	resyncBurst = 1000
	resyncTick  = 100 * time.Millisecond
)

// resyncFrame renders the resync frame of reason.
func resyncFrame(reason string) []byte {
	b, _ := json.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: reason})
	return b
}

// resyncAll tells every connection of this node (all authenticated) to sync and pull what it
// is missing: pushes to them may have been lost. Connections that arrive
// meanwhile sync anyway. It returns when every connection has been told,
// or ctx ends.
func (g *Gateway) resyncAll(ctx context.Context, reason string) {
	frame := resyncFrame(reason)
	conns := g.hub.all()
	g.log.Info("telling connections to sync again: pushes to them may have been lost", "conns", len(conns), "reason", reason)
	t := time.NewTicker(resyncTick)
	defer t.Stop()
	now := g.since()
	for _, c := range conns {
		c.coverFrom(now) // their next sync must cover what the fan-out handled during the break
	}
	for len(conns) > 0 {
		n := min(len(conns), resyncBurst)
		for _, c := range conns[:n] {
			c.reply(frame)
		}
		g.resynced(reason, n)
		conns = conns[n:]
		if len(conns) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resynced counts n resync frames sent for reason.
func (g *Gateway) resynced(reason string, n int) {
	g.metrics.resyncs.Add(int64(n))
	g.cfg.Metrics.Resynced(reason, n)
}
