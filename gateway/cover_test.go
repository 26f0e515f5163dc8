package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A node's connections syncing at once share the reads of the log's ends,
// and each gets ends read after the moment it asked for.
func TestSyncsShareTheReadsOfTheLogsEnds(t *testing.T) {
	epoch := time.Now()
	now := func() time.Duration { return time.Since(epoch) + 1 }
	var f endsFetcher
	var reads atomic.Int64
	fetch := func(context.Context) (map[int]int64, error) {
		n := reads.Add(1)
		time.Sleep(5 * time.Millisecond)
		return map[int]int64{0: n}, nil
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			asked := now()
			before := reads.Load() // reads begun before asked: their results must not be given
			ends, err := f.after(context.Background(), asked, now, fetch)
			if err != nil || ends[0] <= before {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d of 1,000 got ends read before they asked, or an error", bad.Load())
	}
	if n := reads.Load(); n > 200 {
		t.Fatalf("%d reads of the ends for 1,000 syncs: not shared", n)
	}
	t.Logf("%d reads for 1,000 syncs", reads.Load())
}
