package history

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

// seedGroup stores n messages of gid with bodies of body bytes, msgids
// from id0 on, as the persister does: ClickHouse first, then the window.
func (f *fixture) seedGroup(tb testing.TB, gid string, n, body int, id0 int64) {
	tb.Helper()
	ctx := context.Background()
	var batch []schema.Message
	for i := range n {
		batch = append(batch, schema.Message{Gid: gid, Sender: "u", ClientMsgID: fmt.Sprint("c", i), SentAt: 1, Body: make([]byte, body), MsgID: id0 + int64(i)})
		if len(batch) == 500 || i == n-1 {
			if err := f.ch.InsertMessages(ctx, 0, batch); err != nil {
				tb.Fatal(err)
			}
			if err := f.redis.AppendWindow(ctx, nil, batch); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// One user's connections pulling deep pages at once took every connection
// of the ClickHouse pool: another user's page of old messages waited for
// one behind them all (2.9 s with 32 pulls, from 7.3 ms), or failed after
// the driver's 5 s. A user now holds UserReads reads at most, and the
// other's page gets one at once.
func TestOneUsersDeepPullsDoNotStarveAnothers(t *testing.T) {
	f := newFixture(t, 10, true)
	f.seedGroup(t, "big", 3000, 16<<10, 0)
	f.seedGroup(t, "small", 200, 10, 10_000)
	h, err := New(Config{Redis: f.redis, ClickHouse: f.ch})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	hog := WithUser(ctx, "hog")
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			for n := i; ctx.Err() == nil; n += 32 {
				h.Pull(hog, "big", int64(n%2000), 1000) // ErrBusy, mostly
			}
		})
	}
	defer wg.Wait()
	defer stop()
	time.Sleep(500 * time.Millisecond)
	victim := WithUser(context.Background(), "victim")
	var lat []time.Duration
	for range 10 {
		start := time.Now()
		if _, err := h.Pull(victim, "small", 10_100, 50); err != nil {
			t.Fatalf("the victim's page during 32 deep pulls of another user: %v", err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	t.Logf("the victim's page during 32 deep pulls of another user: median %v, max %v", lat[5], lat[9])
	if lat[5] > 200*time.Millisecond {
		t.Errorf("the victim's page during 32 deep pulls of another user: median %v, max %v; want a median under 200ms", lat[5], lat[9])
	}
}

// A user's reads beyond UserReads wait for the user's own, at most
// ReadWait, then fail with ErrBusy; meanwhile another user reads at once,
// and a page read for no user is held to the process's reads only.
func TestReadsAreHeldPerUser(t *testing.T) {
	r := newReads(3, 2, 100*time.Millisecond)
	a := WithUser(context.Background(), "a")
	var held []func()
	for range 2 {
		release, err := r.acquire(a)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	start := time.Now()
	if _, err := r.acquire(a); !errors.Is(err, ErrBusy) || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("a's third read: %v after %v; want ErrBusy after 100ms", err, time.Since(start))
	}
	release, err := r.acquire(WithUser(context.Background(), "b"))
	if err != nil {
		t.Fatalf("b's read while a holds 2 of 3: %v", err)
	}
	if _, err := r.acquire(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("a read for no user with the 3 reads taken: %v; want ErrBusy", err)
	}
	// A waiting read gets the place freed first.
	done := make(chan error)
	go func() {
		release, err := r.acquire(a)
		if err == nil {
			release()
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	held[0]()
	if err := <-done; err != nil {
		t.Fatalf("a's read waiting for a's own: %v", err)
	}
	held[1]()
	release()
	if len(r.users) != 0 || len(r.slots) != 0 {
		t.Fatalf("after every read is given back: %d users, %d reads in flight", len(r.users), len(r.slots))
	}
}
