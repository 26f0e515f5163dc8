package consumers

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

func TestRowBufferDurableFollowsTheInserts(t *testing.T) {
	rec := &recorder{}
	b := newRowBuffer(rec.insert)
	ctx := context.Background()
	if d := b.Durable(0); d != math.MaxInt64 {
		t.Fatalf("empty buffer: Durable = %d, want everything", d)
	}
	b.add(0, 10, []int{1, 2})
	b.add(1, 7, []int{3})
	b.add(0, 12, []int{4})
	if d0, d1 := b.Durable(0), b.Durable(1); d0 != 10 || d1 != 7 {
		t.Fatalf("Durable = %d, %d; want each partition's first buffered offset 10, 7", d0, d1)
	}
	b.add(1, 2, []int{9}) // partition 1 replayed from an earlier offset
	if d1 := b.Durable(1); d1 != 2 {
		t.Fatalf("after a replay from offset 2, Durable(1) = %d, want 2", d1)
	}
	if err := b.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}
	if len(rec.calls) != 1 || len(rec.calls[0]) != 5 {
		t.Fatalf("inserts %v, want one of all 5 rows (both partitions)", rec.calls)
	}
	if d := b.Durable(0); d != math.MaxInt64 {
		t.Errorf("after the insert Durable(0) = %d, want everything", d)
	}

	// A flush asked for soon after the last one waits for a later commit.
	b.add(1, 8, []int{5})
	if err := b.Flush(ctx, false); err != nil {
		t.Fatal(err)
	}
	if len(rec.calls) != 1 || b.Durable(1) != 8 {
		t.Errorf("an unforced flush within %v inserted (%d inserts) or moved Durable(1) to %d", flushGap, len(rec.calls), b.Durable(1))
	}

	// A failed insert keeps the rows and the marks; the retry carries them.
	rec.err = errors.New("clickhouse down")
	b.add(2, 3, []int{6})
	if err := b.Flush(ctx, true); err == nil {
		t.Fatal("Flush hid the insert's error")
	}
	if d1, d2 := b.Durable(1), b.Durable(2); d1 != 8 || d2 != 3 {
		t.Errorf("after a failed insert Durable = %d, %d; want 8, 3 still", d1, d2)
	}
	rec.err = nil
	if err := b.Flush(ctx, true); err != nil {
		t.Fatal(err)
	}
	if last := rec.calls[len(rec.calls)-1]; len(last) != 2 || b.Durable(1) != math.MaxInt64 || b.Durable(2) != math.MaxInt64 {
		t.Errorf("the retry inserted %v; Durable = %d, %d", last, b.Durable(1), b.Durable(2))
	}
}

func TestRowBufferMakesRoomWhenFull(t *testing.T) {
	rec := &recorder{}
	b := newRowBuffer(rec.insert)
	b.add(0, 0, make([]int, maxInsertRows))
	if err := b.makeRoom(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.calls) != 1 || b.Durable(0) != math.MaxInt64 {
		t.Errorf("a full buffer was not flushed before more rows (%d inserts)", len(rec.calls))
	}
	var none *rowBuffer[int]
	if none.makeRoom(context.Background()) != nil || none.Flush(context.Background(), true) != nil || none.Durable(0) != math.MaxInt64 {
		t.Error("a nil buffer (no ClickHouse) is not empty and durable")
	}
}

// bufferedAcks is memAcks whose effect becomes durable only at Flush: the
// runner must never save a position past what was flushed.
type bufferedAcks struct {
	*memAcks
	buf *rowBuffer[int64]

	mu      sync.Mutex
	flushed map[int64]bool // offsets of partition 0 flushed
	down    bool           // inserts fail
}

func (b *bufferedAcks) insert(_ context.Context, offs []int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		return errors.New("clickhouse down")
	}
	for _, o := range offs {
		b.flushed[o] = true
	}
	return nil
}

func (b *bufferedAcks) Handle(ctx context.Context, part int, recs []Record[schema.Ack]) error {
	if err := b.memAcks.Handle(ctx, part, recs); err != nil {
		return err
	}
	offs := make([]int64, len(recs))
	for i := range recs {
		offs[i] = recs[i].Offset
	}
	b.buf.add(part, recs[0].Offset, offs)
	return nil
}

func (b *bufferedAcks) Flush(ctx context.Context, force bool) error { return b.buf.Flush(ctx, force) }
func (b *bufferedAcks) Durable(part int) int64                      { return b.buf.Durable(part) }

// savedWithin reports whether the saved position of partition 0 covers only
// flushed records, and returns it.
func (b *bufferedAcks) savedWithin() (int64, bool) {
	b.memAcks.mu.Lock()
	pos, ok := b.memAcks.offsets[0]
	b.memAcks.mu.Unlock()
	if !ok || pos < 0 {
		return pos, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for o := int64(0); o < pos; o++ {
		if !b.flushed[o] {
			return pos, false
		}
	}
	return pos, true
}

func TestRunnerSavesOnlyWhatAFlusherMadeDurable(t *testing.T) {
	k := newKafka(t, 1)
	h := &bufferedAcks{memAcks: newMemAcks(), flushed: map[int64]bool{}}
	h.buf = newRowBuffer(h.insert)
	h.down = true
	r, _ := runAcksWith(t, k, "acks-flusher", h, h, func(c *Config[schema.Ack]) { c.CommitInterval = 100 * time.Millisecond })
	sendAcks(t, k, 50)
	waitFor(t, "50 acks handled while inserts fail", 20*time.Second, func() bool { return h.handled() == 50 })
	// Commits come due and their flushes fail: nothing may be saved. Handle
	// does not fail here, so every retry is a failed flush of a commit that
	// came due, and a commit saves only after its flush: three of them, or
	// a save, show what the commits did.
	waitFor(t, "three failed flushes, or a save", 20*time.Second, func() bool {
		pos, _ := h.savedWithin()
		return r.Stats().Retries >= 3 || pos > 0
	})
	if pos, ok := h.savedWithin(); !ok || pos > 0 {
		t.Fatalf("saved position %d while no row was inserted", pos)
	}
	h.mu.Lock()
	h.down = false
	h.mu.Unlock()
	waitFor(t, "the position saved after the rows are in", 20*time.Second, func() bool {
		pos, ok := h.savedWithin()
		if !ok {
			t.Fatalf("saved position %d covers rows not inserted", pos)
		}
		return pos == 50
	})
}
