package producers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// HeadAtLeast asked past the log's end shares its broker reads: asks made
// at once share one, and asks that keep coming cost one read every
// headGap. A record written since the last read is still found: no ask is
// answered by a read that began before it.
func TestHeadAtLeastPastTheLogsEndSharesItsReads(t *testing.T) {
	b, p := setup(t, 1)
	ctx := context.Background()
	head, err := p.SendMessage(ctx, msg("g", 0))
	if err != nil {
		t.Fatal(err)
	}
	lists := testserver.CountRequests(b, kmsg.ListOffsets, nil)
	beyond := func() {
		t.Helper()
		if h, err := p.HeadAtLeast(ctx, "g", 1<<40); err != nil || h != head {
			t.Errorf("HeadAtLeast(g, 2^40) = %d, %v; want the log's head %d", h, err, head)
		}
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); beyond() }()
	}
	wg.Wait()
	if n := lists.Load(); n > 3 {
		t.Errorf("50 asks at once past the log's end made %d ListOffsets, want 3 at most", n)
	}

	lists.Store(0)
	const d = 500 * time.Millisecond
	asks := 0
	for t0 := time.Now(); time.Since(t0) < d; asks++ {
		beyond()
	}
	if n, most := lists.Load(), int64(d/headGap)+2; n > most {
		t.Errorf("%d asks one after another for %v past the log's end made %d ListOffsets, want %d at most", asks, d, n, most)
	}

	// Another producer writes right after a read that found the ask past
	// the end: the next ask is answered by a read that began after it.
	q, err := New(Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	beyond()
	id, err := q.SendMessage(ctx, &schema.Message{Gid: "g", Sender: "u2", Body: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := p.HeadAtLeast(ctx, "g", id); err != nil || h < id {
		t.Errorf("HeadAtLeast(g, %d) of a record written since the last read = %d, %v; want it found", id, h, err)
	}
}
