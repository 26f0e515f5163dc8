package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// churn disconnects cfg.Churn online members per second (picked at
// random; one already away is skipped) until stop is closed. Each comes
// back with a new client after cfg.ChurnOffline, or at once when stop is
// closed; churn returns when every one is back. A new client starts each
// group at the member's ack cursor, so what the old one was handed but had
// not acked comes again: the loss check counts that as redelivered, not as
// a duplicate.
func (b *bench) churn(ctx context.Context, stop <-chan struct{}) {
	if b.cfg.Churn <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(3, 4))
	t := time.NewTicker(time.Duration(float64(time.Second) / b.cfg.Churn))
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := b.members[rng.IntN(len(b.members))]
		c := m.take()
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.rec.churnOut.Add(1)
			_ = c.Close()
			b.rec.addChurned(c.Stats())
			select {
			case <-time.After(b.cfg.ChurnOffline):
			case <-stop:
			case <-ctx.Done():
				return
			}
			for attempt := 0; ; attempt++ {
				err := b.dial(ctx, m)
				if err == nil {
					b.rec.churnIn.Add(1)
					return
				}
				b.rec.error(err)
				if attempt == 4 || !sleepCtx(ctx, time.Second) {
					return // left offline: the loss check will say what it missed
				}
			}
		}()
	}
}
