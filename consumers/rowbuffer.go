package consumers

import (
	"context"
	"math"
	"sync"
	"time"
)

// Flusher is a Handler that keeps part of a batch's effect in memory after
// Handle returns: rows gathered for one ClickHouse insert. The runner
// saves and commits a partition's position only up to Durable, and calls
// Flush when a commit is due; a partition whose rows are not durable yet
// commits what is and tries again an interval later.
type Flusher interface {
	// Flush makes what Handle gathered durable. Unless force is set, it
	// may do nothing when the last flush was recent (then Durable tells
	// what the commit may cover).
	Flush(ctx context.Context, force bool) error
	// Durable is the offset of part's first record whose effect is not
	// durable yet; math.MaxInt64 when every handled record's is.
	Durable(part int) int64
}

// Defaults of the ClickHouse row buffers.
const (
	// flushGap is the least time between two flushes a commit asks for:
	// the partitions of a consumer commit at their own times, and the
	// first one due flushes the rows of all of them.
	flushGap = 500 * time.Millisecond
	// maxInsertRows is the most rows gathered for one insert: a projector's
	// Handle flushes a buffer this full before it adds more, and a
	// persister's round this full is inserted without waiting longer. A
	// replay fills them quickly; memory stays bounded.
	maxInsertRows = 50000
)

// rowBuffer gathers a projector's ClickHouse rows from all its partitions
// and inserts them together when a commit is due (see Flusher). ClickHouse
// makes a part per insert and merges parts in the background: one insert
// per partition per batch, from every partition of every consumer, cost it
// more CPU than the rows did (a core at 100 messages/s into 50-member
// groups). Safe for concurrent use.
type rowBuffer[T any] struct {
	insert func(context.Context, []T) error

	flushing sync.Mutex // one flush at a time; held across the insert

	mu        sync.Mutex
	rows      []T
	first     map[int]int64 // per partition, the offset of its first row in rows
	inflight  map[int]int64 // the same for the rows of the insert in flight
	lastFlush time.Time
}

func newRowBuffer[T any](insert func(context.Context, []T) error) *rowBuffer[T] {
	return &rowBuffer[T]{insert: insert, first: map[int]int64{}, inflight: map[int]int64{}}
}

// makeRoom flushes a full buffer, so that memory stays bounded; Handle
// calls it before it writes anything, so an error leaves nothing half done.
// A nil buffer (no ClickHouse) has room.
func (b *rowBuffer[T]) makeRoom(ctx context.Context) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	full := len(b.rows) >= maxInsertRows
	b.mu.Unlock()
	if !full {
		return nil
	}
	return b.Flush(ctx, true)
}

// add buffers the rows of one batch of part, whose first record is at
// offset.
func (b *rowBuffer[T]) add(part int, offset int64, rows []T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rows = append(b.rows, rows...)
	// The lowest, not the first added: a partition replayed from an
	// earlier offset (its state was wiped) adds rows below those it
	// buffered before.
	if cur, ok := b.first[part]; !ok || offset < cur {
		b.first[part] = offset
	}
}

// Flush implements Flusher. A nil buffer has nothing to flush.
func (b *rowBuffer[T]) Flush(ctx context.Context, force bool) error {
	if b == nil {
		return nil
	}
	b.flushing.Lock()
	defer b.flushing.Unlock()
	b.mu.Lock()
	if len(b.rows) == 0 || !force && time.Since(b.lastFlush) < flushGap {
		b.mu.Unlock()
		return nil
	}
	rows, first := b.rows, b.first
	b.rows, b.first, b.inflight = nil, map[int]int64{}, first
	b.lastFlush = time.Now()
	b.mu.Unlock()

	err := b.insert(ctx, rows)

	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight = map[int]int64{}
	if err != nil { // put the rows back in front, and their partitions' marks
		b.rows = append(rows, b.rows...)
		for part, off := range first {
			b.first[part] = min(off, b.firstOf(part))
		}
	}
	return err
}

// Durable implements Flusher. A nil buffer holds nothing.
func (b *rowBuffer[T]) Durable(part int) int64 {
	if b == nil {
		return math.MaxInt64
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.firstOf(part)
	if off, ok := b.inflight[part]; ok {
		d = min(d, off)
	}
	return d
}

// firstOf is part's mark in first, or math.MaxInt64. b.mu is held.
func (b *rowBuffer[T]) firstOf(part int) int64 {
	if off, ok := b.first[part]; ok {
		return off
	}
	return math.MaxInt64
}
