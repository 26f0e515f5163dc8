package gateway

import (
	"sync"
	"time"
)

// admission bounds the sends a gateway works on at once, so that an
// overload is refused at the door, at once and cheaply (overloaded), rather
// than queued until every client has timed out and resent: a queue of sends
// that nobody waits for any more is how a chat server collapses.
//
// The bound adapts to what the gateway's stores can take (AIMD, as TCP's
// window): it grows by one for every bound's worth of sends that took less
// than the target, and halves when a send took longer, at most once per
// target, so that one slow moment is one halving. It stays within
// [minSending, max]. While clients catch up (catchUp), their bound is
// halved first: the sends' is halved only once theirs is at its floor.
type admission struct {
	target  time.Duration // <=0: no bound
	max     float64
	catchUp *catchUp // takes the halvings first, and grows with the sends on time; nil: none

	mu      sync.Mutex
	limit   float64
	sending int
	cut     time.Time // the last halving
}

// minSending is the floor of the bound: some sends always go through.
const minSending = 8

func newAdmission(target time.Duration, max int) *admission {
	return &admission{target: target, max: float64(max), limit: float64(max)}
}

// enter takes a place for a send; false means the gateway is overloaded.
func (a *admission) enter() bool {
	if a.target <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if float64(a.sending) >= a.limit {
		return false
	}
	a.sending++
	return true
}

// leave gives the place back, with how long the send took.
func (a *admission) leave(took time.Duration) {
	if a.target <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sending--
	if took <= a.target {
		a.limit = min(a.max, a.limit+1/a.limit)
		if a.catchUp != nil {
			a.catchUp.onTime()
		}
		return
	}
	if now := time.Now(); now.Sub(a.cut) >= a.target {
		if a.catchUp != nil && a.catchUp.yield(now) {
			return
		}
		a.limit = max(minSending, a.limit/2)
		a.cut = now
	}
}

// bound is the current bound (tests, metrics).
func (a *admission) bound() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.limit)
}
