package store

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/topics"
)

// cursorBatchMax is the most CursorState calls one round trip carries.
const cursorBatchMax = 256

// cursorLanes is how many round trips of CursorState calls may be under
// way at once: one per lane, a group's calls always in the same lane. A
// round trip held up (a cluster node failing over) holds up the groups of
// its lane only.
const cursorLanes = 16

// cursorBatch gathers CursorState calls into shared round trips.
type cursorBatch struct {
	lanes [cursorLanes]cursorLane
}

// A cursorLane's calls share round trips. A call that finds no round trip
// under way makes its own at once, on its own goroutine, so a lone ack
// waits for nothing. Calls that come meanwhile queue; when the round trip
// is done, a goroutine of the lane's sends what queued in one pipeline,
// and the next, until none is left.
type cursorLane struct {
	mu     sync.Mutex
	busy   bool
	queued []*cursorQuery
}

func (b *cursorBatch) do(ctx context.Context, r *Redis, q *cursorQuery) (CursorState, error) {
	return b.lane(q.gid).do(ctx, r, q)
}

// lane is gid's lane, by the hash that places a group's records.
func (b *cursorBatch) lane(gid string) *cursorLane {
	return &b.lanes[topics.Partition(gid, cursorLanes)]
}

func (l *cursorLane) do(ctx context.Context, r *Redis, q *cursorQuery) (CursorState, error) {
	l.mu.Lock()
	if l.busy {
		q.done = make(chan struct{})
		l.queued = append(l.queued, q)
		l.mu.Unlock()
		select {
		case <-q.done:
			return q.st, q.err
		case <-ctx.Done():
			// The round trip goes on; its answer is dropped.
			return CursorState{}, ctx.Err()
		}
	}
	l.busy = true
	l.mu.Unlock()
	defer l.handOff(r) // even if the round trip panics: the queued must not wait for ever
	roundTrip(ctx, r, []*cursorQuery{q})
	return q.st, q.err
}

// handOff ends a caller's own round trip: what queued meanwhile goes next.
func (l *cursorLane) handOff(r *Redis) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queued) == 0 {
		l.busy = false
		return
	}
	go l.drain(r)
}

// drain sends what queued, a pipeline at a time, until nothing is left.
// Its round trips are bounded by the client's timeouts, not by any one
// caller's ctx: a caller that gives up leaves the others' answers coming.
func (l *cursorLane) drain(r *Redis) {
	for {
		l.mu.Lock()
		batch := l.queued
		if len(batch) > cursorBatchMax {
			batch = batch[:cursorBatchMax]
		}
		l.queued = l.queued[len(batch):]
		if len(batch) == 0 {
			l.busy, l.queued = false, nil
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		roundTrip(context.Background(), r, batch)
		for _, q := range batch {
			close(q.done)
		}
	}
}

// roundTrip sends the commands of qs in one pipeline and sets their
// answers.
func roundTrip(ctx context.Context, r *Redis, qs []*cursorQuery) {
	cmds, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, q := range qs {
			q.queue(ctx, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && !anyErr(cmds) {
		// The pipeline failed before any command ran (a connection
		// refused at its handshake, say): no command says so, and each
		// call must.
		for _, c := range cmds {
			c.SetErr(err)
		}
	}
	for _, q := range qs {
		q.st, q.err = q.result()
	}
}

func anyErr(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c.Err() != nil {
			return true
		}
	}
	return false
}
