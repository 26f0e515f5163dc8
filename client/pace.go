package client

import (
	"context"
	"sync"
	"time"
)

// pacer is the budget of the client's own frames (acks, reads, pulls and
// syncs): a token bucket of rate tokens a second up to burst, full at
// first. A gateway allows a connection a rate of frames (200 a second,
// bursts of 400, by default) and refuses those over it as rate_limited,
// whatever they are: the client's own frames kept well under it leave the
// application's sends room. An answer the gateway charges as more than its
// frame (charge) takes those frames too. Safe for concurrent use.
type pacer struct {
	rate  float64
	burst float64

	mu     sync.Mutex
	tokens float64 // as of last; below 0 after spending more than there was
	last   time.Time
}

func newPacer(rate float64, burst int) *pacer {
	return &pacer{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// refillLocked adds the tokens earned since the last look.
func (p *pacer) refillLocked() {
	now := time.Now()
	p.tokens = min(p.burst, p.tokens+now.Sub(p.last).Seconds()*p.rate)
	p.last = now
}

// avail returns the whole tokens there are now, none taken.
func (p *pacer) avail() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	return max(0, int(p.tokens))
}

// delay is how long until n tokens (at most burst) are there.
func (p *pacer) delay(n int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	short := min(float64(n), p.burst) - p.tokens
	if short <= 0 {
		return 0
	}
	return time.Duration(short / p.rate * float64(time.Second))
}

// wait takes a token, waiting for one, or returns ctx's error.
func (p *pacer) wait(ctx context.Context) error { return p.waitN(ctx, 1) }

// waitN takes n tokens once n (at most burst) are there, or returns ctx's
// error. A frame that costs n waits until the budget holds them all: the
// frames that cost one each (acks, reads, pulls) go first meanwhile, not
// after a debt it would make at every turn.
func (p *pacer) waitN(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		p.refillLocked()
		want := min(float64(n), p.burst)
		if p.tokens >= want {
			p.tokens -= float64(n)
			p.mu.Unlock()
			return nil
		}
		d := time.Duration((want - p.tokens) / p.rate * float64(time.Second))
		p.mu.Unlock()
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// charge takes n tokens more, into debt if need be, as a gateway charges
// an answer that costs more than its frame once it is answered (a sync, one
// more frame per protocol.SyncPer groups it lists; a who_read, one more per
// protocol.WhoReadPer ids): the client's frames after it keep to the
// gateway's rate. A negative n gives back tokens taken for more than the
// answer cost, up to burst.
func (p *pacer) charge(n int) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	p.tokens = min(p.burst, p.tokens-float64(n))
}

// chargeAnew drops the debt there is, then charges n: a new connection owes
// a gateway nothing of the one before (its frames are counted anew), so a
// client whose connections are cut one after another does not pile up the
// cost of each one's sync.
func (p *pacer) chargeAnew(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	p.tokens = max(p.tokens, 0) - float64(n)
}

// empty drops the tokens there are: the server refused a frame as over
// its rate, so the bucket starts again from none.
func (p *pacer) empty() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refillLocked()
	p.tokens = min(p.tokens, 0)
}
