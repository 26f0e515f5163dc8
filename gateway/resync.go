package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// resyncPace spreads the resync frames of a node's connections: at most
// burst connections are told each every, so that ten thousand clients do
// not sync at the same moment. The defaults tell 10,000 a second.
type resyncPace struct {
	burst int
	every time.Duration
}

const (
	resyncBurst = 1000
	resyncTick  = 100 * time.Millisecond
)

// resyncFrame renders the resync frame of reason.
func resyncFrame(reason string) []byte {
	b, _ := json.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: reason})
	return b
}

// askResync asks for every connection of this node to be told to sync
// again (see resyncConns). It never blocks: an ask made while another
// waits is the same ask.
func (g *Gateway) askResync(reason string) {
	select {
	case g.resyncAsk <- reason:
	default:
	}
}

// resyncConns tells the connections of this node to sync again whenever
// asked (askResync), until ctx ends. One loop for the node keeps the pace
// whatever the asks: a push route that breaks again while connections are
// being told starts the telling over, for every connection (pushes to
// those told already may have been lost too), at the same pace, rather
// than adding a second storm to the first.
func (g *Gateway) resyncConns(ctx context.Context) {
	var last time.Time // of the last burst
	for {
		select {
		case <-ctx.Done():
			return
		case reason := <-g.resyncAsk:
			for reason != "" {
				reason = g.resyncAll(ctx, reason, &last)
			}
		}
	}
}

// resyncAll tells every connection of this node (all authenticated) to
// sync and pull what it is missing: pushes to them may have been lost.
// Connections that arrive meanwhile sync anyway. It returns when every
// connection has been told or ctx ends, with "", or at a new ask, with its
// reason. last is the time of the last burst, kept across calls.
func (g *Gateway) resyncAll(ctx context.Context, reason string, last *time.Time) (again string) {
	frame := resyncFrame(reason)
	conns := g.hub.all()
	g.log.Info("telling connections to sync again: pushes to them may have been lost", "conns", len(conns), "reason", reason)
	now := g.since()
	for _, c := range conns {
		c.coverFrom(now) // their next sync must cover what the fan-out handled during the break
	}
	for len(conns) > 0 {
		if wait := time.Until(last.Add(g.pace.every)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ""
			case again = <-g.resyncAsk:
				t.Stop()
				return again
			case <-t.C:
			}
		}
		n := min(len(conns), g.pace.burst)
		for _, c := range conns[:n] {
			c.reply(frame)
		}
		g.resynced(reason, n)
		*last = time.Now()
		conns = conns[n:]
	}
	return ""
}

// resyncUser tells the connections of uid here to sync again, for
// reason, their next sync checked from now (see cover.go).
func (g *Gateway) resyncUser(uid, reason string) {
	var conns []*conn
	g.hub.each(uid, func(c *conn) { conns = append(conns, c) })
	frame, now := resyncFrame(reason), g.since()
	for _, c := range conns {
		c.coverFrom(now)
		c.reply(frame)
	}
	g.resynced(reason, len(conns))
}

// resynced counts n resync frames sent for reason.
func (g *Gateway) resynced(reason string, n int) {
	g.metrics.resyncs.Add(int64(n))
	g.cfg.Metrics.Resynced(reason, n)
}

// lostResyncGap is the least time between two resyncs for pushes lost to
// payloads this gateway could not decode.
const lostResyncGap = 10 * time.Second

// lostPushes paces the resyncs for pushes lost to payloads the gateway
// could not decode: one at once, then, for those lost within
// lostResyncGap of it, one more at the gap's end, so that the last of a
// stream of them is told too.
type lostPushes struct {
	mu    sync.Mutex
	asked time.Time
	later *time.Timer // the resync due at the gap's end; nil: none
}

func (l *lostPushes) note(g *Gateway) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wait := lostResyncGap - time.Since(l.asked)
	if wait <= 0 {
		l.asked = time.Now()
		g.askResync(protocol.ResyncPushRoute)
		return
	}
	if l.later == nil {
		l.later = time.AfterFunc(wait, func() {
			l.mu.Lock()
			l.later, l.asked = nil, time.Now()
			l.mu.Unlock()
			g.askResync(protocol.ResyncPushRoute)
		})
	}
}

func (l *lostPushes) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.later != nil {
		l.later.Stop()
	}
}
