package consumers

import (
	"context"
	"sync"
	"time"
)

// Defaults of the persister's insert coalescing (see coalescer).
const (
	// DefaultPersisterWait is how long the first batch of a round waits
	// for other partitions' batches before their messages go to ClickHouse
	// in one insert. The Redis window, which pulls read first, is written
	// after the insert, so the wait is short.
	DefaultPersisterWait = 100 * time.Millisecond
)

// coalescer merges the rows that the persister's partitions insert at
// about the same time into one insert (see rowBuffer for why). Unlike the
// projectors' buffers, it holds Handle until the rows are in: the window
// may only hold what ClickHouse has.
//
// The first caller of a round waits up to wait (less once the round holds
// maxInsertRows), then inserts every row the round gathered; each caller
// returns the error of the insert that carried its rows, so a Handle still
// returns only after its rows are in ClickHouse (commit after effect).
// Rounds do not wait for each other. Safe for concurrent use.
type coalescer[T any] struct {
	wait   time.Duration
	insert func(context.Context, []T) error

	mu   sync.Mutex
	open *round[T] // the round that takes new rows; nil: none
}

type round[T any] struct {
	rows []T
	full chan struct{} // closed when rows reach maxInsertRows
	done chan struct{} // closed when the insert returned; err is its result
	err  error
}

func newCoalescer[T any](wait time.Duration, insert func(context.Context, []T) error) *coalescer[T] {
	if wait == 0 {
		wait = DefaultPersisterWait
	}
	return &coalescer[T]{wait: wait, insert: insert}
}

// add inserts rows with whatever other rows arrive while the round waits,
// and returns when they are in (or ctx ends; the rows may then still be
// inserted, which is harmless: inserts are idempotent).
func (c *coalescer[T]) add(ctx context.Context, rows []T) error {
	if len(rows) == 0 {
		return nil
	}
	if c.wait < 0 {
		return c.insert(ctx, rows)
	}
	c.mu.Lock()
	r := c.open
	lead := r == nil
	if lead {
		r = &round[T]{full: make(chan struct{}), done: make(chan struct{})}
		c.open = r
	}
	before := len(r.rows)
	r.rows = append(r.rows, rows...)
	if before < maxInsertRows && len(r.rows) >= maxInsertRows {
		close(r.full)
	}
	c.mu.Unlock()
	if lead {
		go c.lead(ctx, r)
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lead waits for the round to fill, closes it to new rows and inserts it.
// The leader's ctx ending (its partition revoked, its runner stopping)
// cuts the wait short, but not the insert, which carries other callers'
// rows too: the insert bounds its own time (ClickHouse's QueryTimeout).
func (c *coalescer[T]) lead(ctx context.Context, r *round[T]) {
	t := time.NewTimer(c.wait)
	select {
	case <-t.C:
	case <-r.full:
	case <-ctx.Done():
	}
	t.Stop()
	c.mu.Lock()
	if c.open == r {
		c.open = nil
	}
	c.mu.Unlock()
	// r.rows no longer changes: the round is closed.
	r.err = c.insert(context.WithoutCancel(ctx), r.rows)
	close(r.done)
}
