package store

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// cursorBatchMax is the most CursorState calls one round trip carries.
const cursorBatchMax = 256

// cursorBatch gathers CursorState calls into shared round trips. A call
// that finds no round trip under way makes its own at once, on its own
// goroutine, so a lone ack waits for nothing. Calls that come meanwhile
// queue; when the round trip is done, a goroutine of the batch's sends
// what queued in one pipeline, and the next, until none is left.
type cursorBatch struct {
	mu     sync.Mutex
	busy   bool
	queued []*cursorQuery
}

func (b *cursorBatch) do(ctx context.Context, r *Redis, q *cursorQuery) (CursorState, error) {
	b.mu.Lock()
	if b.busy {
		q.done = make(chan struct{})
		b.queued = append(b.queued, q)
		b.mu.Unlock()
		select {
		case <-q.done:
			return q.st, q.err
		case <-ctx.Done():
			// The round trip goes on; its answer is dropped.
			return CursorState{}, ctx.Err()
		}
	}
	b.busy = true
	b.mu.Unlock()
	r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		q.queue(ctx, p)
		return nil
	})
	q.answer()
	b.mu.Lock()
	if len(b.queued) == 0 {
		b.busy = false
		b.mu.Unlock()
	} else {
		b.mu.Unlock()
		go b.drain(r)
	}
	return q.st, q.err
}

// drain sends what queued, a pipeline at a time, until nothing is left.
// Its round trips are bounded by the client's timeouts, not by any one
// caller's ctx: a caller that gives up leaves the others' answers coming.
func (b *cursorBatch) drain(r *Redis) {
	ctx := context.Background()
	for {
		b.mu.Lock()
		batch := b.queued
		if len(batch) > cursorBatchMax {
			batch = batch[:cursorBatchMax]
		}
		b.queued = b.queued[len(batch):]
		if len(batch) == 0 {
			b.busy, b.queued = false, nil
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, q := range batch {
				q.queue(ctx, p)
			}
			return nil
		})
		for _, q := range batch {
			q.answer()
			close(q.done)
		}
	}
}
