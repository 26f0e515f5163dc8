package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// catchUp bounds the work of clients catching up that a gateway does at
// once: the setup of a connection once authenticated (its user's
// presence), syncs and pulls. It is apart from the sends' admission, so
// that when a gateway dies or drains and its clients (thousands) come
// back to the others, their setups, syncs and pulls do not take the
// places of the sends of users who were never disconnected, and the
// sends never wait behind an unbounded crowd of them at the stores.
//
// Past the bound, work waits in line for a place, at most catchUpWait,
// and is then refused as overloaded (the client retries after a
// back-off, as it does an upgrade refused so): a reconnecting client
// waits a moment or is told to come back, and is never served after it
// has given up on the answer.
//
// The sends have the first claim on the stores: a send that took longer
// than the sends' target while clients catch up halves this bound, not
// the sends', at most once per target, down to minCatchingUp; only then
// is the sends' own bound halved (see admission.leave). The bound grows
// back by one for every bound's worth of sends that were on time, or of
// its own work done a target after the last halving, up to max.
type catchUp struct {
	target time.Duration // the sends' target: what halves the bound, and how often
	max    float64       // <=0: no bound

	mu      sync.Mutex
	limit   float64
	working int
	line    []chan struct{} // waiting for a place, the longest waiting first
	cut     time.Time       // the last halving
}

// minCatchingUp is the floor of the bound: clients always catch up.
const minCatchingUp = 4

// catchUpWait is the longest a setup, sync or pull waits for a place
// before it is refused as overloaded: well within what a client waits
// for an answer (the Go client's RequestTimeout, 10 s by default), as
// long as a pull of older messages waits for ClickHouse.
const catchUpWait = time.Second

func newCatchUp(target time.Duration, max int) *catchUp {
	return &catchUp{target: target, max: float64(max), limit: float64(max)}
}

// enter takes a place, waiting for one until catchUpWait or ctx ends;
// false means the gateway is overloaded.
func (a *catchUp) enter(ctx context.Context) bool {
	if a.max <= 0 {
		return true
	}
	a.mu.Lock()
	if len(a.line) == 0 && float64(a.working) < a.limit {
		a.working++
		a.mu.Unlock()
		return true
	}
	turn := make(chan struct{})
	a.line = append(a.line, turn)
	a.mu.Unlock()
	t := time.NewTimer(catchUpWait)
	defer t.Stop()
	select {
	case <-turn:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if i := slices.Index(a.line, turn); i >= 0 {
		a.line = slices.Delete(a.line, i, i+1)
		return false
	}
	// Given a place as the wait ended: it is given on.
	a.working--
	a.handOnLocked()
	return false
}

// leave gives the place back.
func (a *catchUp) leave() {
	if a.max <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.working--
	if time.Since(a.cut) >= a.target {
		a.growLocked()
	}
	a.handOnLocked()
}

// onTime notes a send that took no longer than its target.
func (a *catchUp) onTime() {
	if a.max <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.growLocked()
	a.handOnLocked()
}

// yield takes a slow send's halving, at now, if clients are catching up
// and the bound is above its floor or was halved within the last target
// (the halving has yet to tell); false leaves it to the sends' bound.
func (a *catchUp) yield(now time.Time) bool {
	if a.max <= 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.working == 0 && len(a.line) == 0:
		return false // the sends' own load
	case now.Sub(a.cut) < a.target:
		return true
	case a.limit <= minCatchingUp:
		return false
	}
	a.limit = max(minCatchingUp, a.limit/2)
	a.cut = now
	return true
}

func (a *catchUp) growLocked() {
	a.limit = min(a.max, a.limit+1/a.limit)
}

// handOnLocked gives the free places to those waiting, in turn.
func (a *catchUp) handOnLocked() {
	for len(a.line) > 0 && float64(a.working) < a.limit {
		close(a.line[0])
		a.line = a.line[1:]
		a.working++
	}
}

// bound is the current bound (tests, metrics).
func (a *catchUp) bound() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.limit)
}

// catchingUp runs a sync or pull of uid in a place of the catch-up bound.
func (g *Gateway) catchingUp(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	if !g.catchUp.enter(ctx) {
		g.metrics.catchUpRefused.Add(1)
		return nil, protocol.Errorf(protocol.CodeOverloaded, "the server has more clients catching up than it can take in time; retry the %s after a back-off", r.Op)
	}
	defer g.catchUp.leave()
	if r.Op == protocol.OpSync {
		return g.sync(ctx, uid, r)
	}
	return g.pull(ctx, uid, r)
}
