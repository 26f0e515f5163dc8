package consumers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// recorder is an insert that keeps what each call carried.
type recorder struct {
	mu    sync.Mutex
	calls [][]int
	err   error
}

func (r *recorder) insert(ctx context.Context, rows []int) error {
	if err := ctx.Err(); err != nil {
		return err // as a real insert: nothing goes in on an ended context
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, slices.Clone(rows))
	return r.err
}

// addAtOnce calls c.add from n goroutines at once, with rows(i) from the
// i-th, and returns their errors.
func addAtOnce(c *coalescer[int], n int, rows func(i int) []int) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.add(context.Background(), rows(i))
		}()
	}
	wg.Wait()
	return errs
}

func TestCoalescerMergesConcurrentBatches(t *testing.T) {
	rec := &recorder{}
	c := newCoalescer(200*time.Millisecond, rec.insert)
	errs := addAtOnce(c, 8, func(i int) []int { return []int{2 * i, 2*i + 1} })
	for i, err := range errs {
		if err != nil {
			t.Errorf("add %d: %v", i, err)
		}
	}
	if len(rec.calls) != 1 {
		t.Fatalf("8 concurrent batches made %d inserts, want 1: %v", len(rec.calls), rec.calls)
	}
	got := slices.Sorted(slices.Values(rec.calls[0]))
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; !slices.Equal(got, want) {
		t.Errorf("the insert carried %v, want %v", got, want)
	}
}

func TestCoalescerReturnsTheInsertErrorToEveryCaller(t *testing.T) {
	rec := &recorder{err: errors.New("clickhouse down")}
	c := newCoalescer(100*time.Millisecond, rec.insert)
	errs := addAtOnce(c, 4, func(i int) []int { return []int{i} })
	for i, err := range errs {
		if !errors.Is(err, rec.err) {
			t.Errorf("add %d returned %v, want the insert's error (its rows are not in)", i, err)
		}
	}
	// The next round is a new insert: a retry carries the rows again.
	rec.err = nil
	if err := c.add(context.Background(), []int{9}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := len(rec.calls); n < 2 || !slices.Equal(rec.calls[n-1], []int{9}) {
		t.Errorf("inserts %v: the retry did not get its own round", rec.calls)
	}
}

func TestCoalescerInsertsAFullRoundAtOnce(t *testing.T) {
	rec := &recorder{}
	c := newCoalescer(time.Hour, rec.insert)
	done := make(chan error, 1)
	go func() { done <- c.add(context.Background(), make([]int, maxInsertRows)) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a round of maxInsertRows rows waited for the round's wait (1h)")
	}
	if len(rec.calls) != 1 || len(rec.calls[0]) != maxInsertRows {
		t.Errorf("%d inserts, want 1 of %d rows", len(rec.calls), maxInsertRows)
	}
}

func TestCoalescerStopsWaitingWhenTheCallerLeaves(t *testing.T) {
	rec := &recorder{}
	c := newCoalescer(time.Hour, rec.insert)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.add(ctx, []int{1}) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		rec.mu.Lock()
		in := len(rec.calls) == 1 && slices.Equal(rec.calls[0], []int{1})
		rec.mu.Unlock()
		if err == nil && !in {
			t.Error("add returned nil after its context ended, and its rows are not in")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("add kept waiting after its context ended")
	}
}

func TestCoalescerWithoutWaitInsertsEachBatch(t *testing.T) {
	rec := &recorder{}
	c := newCoalescer(-1, rec.insert)
	for i := range 3 {
		if err := c.add(context.Background(), []int{i}); err != nil {
			t.Fatal(err)
		}
	}
	if len(rec.calls) != 3 {
		t.Errorf("%d inserts, want one per batch (3)", len(rec.calls))
	}
}

// The first caller of a round leaving (its partition revoked) must not
// fail the insert of the others who joined it.
func TestCoalescerInsertsTheRoundWhenItsLeaderLeaves(t *testing.T) {
	rec := &recorder{}
	c := newCoalescer(time.Hour, rec.insert) // the round ends when its leader leaves, not before
	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() { leader <- c.add(ctx, []int{1}) }()
	waitRoundRows(t, c, 1)
	follower := make(chan error, 1)
	go func() { follower <- c.add(context.Background(), []int{2}) }()
	waitRoundRows(t, c, 2)
	cancel()
	select {
	case <-leader:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader kept waiting after its context ended")
	}
	select {
	case err := <-follower:
		if err != nil {
			t.Fatalf("the follower's rows failed with the leader's context: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower waited for ever")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.calls) != 1 || !slices.Equal(slices.Sorted(slices.Values(rec.calls[0])), []int{1, 2}) {
		t.Fatalf("inserts %v, want one of [1 2]", rec.calls)
	}
}

// waitRoundRows waits until the open round of c holds n rows.
func waitRoundRows(t *testing.T, c *coalescer[int], n int) {
	t.Helper()
	waitFor(t, fmt.Sprint("the open round to hold ", n, " rows"), 10*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.open != nil && len(c.open.rows) == n
	})
}
