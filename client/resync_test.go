package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// awayIn has the client lose its connection while bob posts a message in
// each of n groups (g0 to g<n-1>), and lets it reconnect, pulls answered
// rtt after they are asked (each on its own, as over a network of that
// round trip). It returns the number of pulls made before.
func awayIn(t *testing.T, p *peer, n int, rtt time.Duration) int {
	t.Helper()
	p.set(func(p *peer) { p.refuse = true })
	p.kill()
	for i := range n {
		p.post(fmt.Sprint("g", i), "bob", "while away")
	}
	before := len(p.requests(protocol.OpPull))
	p.set(func(p *peer) { p.refuse, p.pullDelay = false, rtt })
	return before
}

// After a reconnect the client pulls the groups with new messages a few at
// a time, not one after another: a user with a new message in each of 300
// groups, over a network of 20 ms round trips, waited 300 round trips (6 s)
// before the last group was current, and its pushes to the groups not yet
// pulled were held behind their gaps meanwhile. Every message still comes
// once, in order per group, with one pull per group.
func TestAReconnectPullsTheGroupsWithNewMessagesAFewAtATime(t *testing.T) {
	const n, rtt, most = 300, 20 * time.Millisecond, 8 // most: Config.ResyncPulls's default
	p := newPeer(t, manyGroups(n))
	// A budget of frames that does not pace these pulls: the round trips
	// alone are measured.
	_, rec := dial(t, p, "alice", func(c *Config) { c.FrameRate, c.FrameBurst = 1e6, 1e6 })
	for i := range n {
		p.post(fmt.Sprint("g", i), "bob", "before")
	}
	waitFor(t, "a message of every group", func() bool { return rec.len() == n })

	before := awayIn(t, p, n, rtt)
	start := time.Now()
	for rec.len() < 2*n {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d of %d messages sent while away delivered after 30 s", rec.len()-n, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond) // a pull or delivery too many, if any, is made by now
	rec.check(t)
	if got := rec.len(); got != 2*n {
		t.Errorf("%d messages delivered, want %d", got, 2*n)
	}
	p.mu.Lock()
	inFlight := p.mostPulls
	p.mu.Unlock()
	pulls := len(p.requests(protocol.OpPull)) - before
	t.Logf("%d groups caught up in %v (%d round trips of %v), %d pulls, at most %d in flight",
		n, took.Round(time.Millisecond), int(took/rtt), rtt, pulls, inFlight)
	if inFlight < 2 || inFlight > most {
		t.Errorf("at most %d pulls in flight at once; want 2 to %d", inFlight, most)
	}
	if pulls != n {
		t.Errorf("%d pulls for %d groups with a new message each; want %d", pulls, n, n)
	}
	if took > n*rtt/2 {
		t.Errorf("the %d groups caught up in %v, %d round trips of %v; want under %v", n, took.Round(time.Millisecond), int(took/rtt), rtt, n*rtt/2)
	}
}

// Close while a reconnect's pulls are in flight (their answers slow to
// come) returns within a bound, a call waiting meanwhile ends with
// ErrClosed, and no goroutine of the pulls is left (TestMain checks).
func TestCloseDuringAReconnectsPullsIsBounded(t *testing.T) {
	const n = 100
	p := newPeer(t, manyGroups(n))
	c, rec := dial(t, p, "alice", func(c *Config) { c.FrameRate, c.FrameBurst = 1e6, 1e6 })
	for i := range n {
		p.post(fmt.Sprint("g", i), "bob", "before")
	}
	waitFor(t, "a message of every group", func() bool { return rec.len() == n })

	awayIn(t, p, n, time.Minute) // pulls that are not answered
	waitFor(t, "the reconnect's pulls", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.pullsInFlight > 0
	})
	opened := make(chan error, 1)
	go func() { opened <- c.Open(context.Background(), "g0") }()
	time.Sleep(50 * time.Millisecond) // Open waits for the resync's pull of g0
	closeWithin(t, c, 3*time.Second)
	select {
	case err := <-opened:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Open during Close: %v; want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Open still waiting 3 s after Close")
	}
	if got := rec.len(); got != n {
		t.Errorf("%d messages delivered, want the %d before (the others were never answered)", got, n)
	}
}

// BenchmarkReconnectCatchUp times a reconnect of a user with a new message
// in each of 300 groups, over a network of 20 ms round trips, until every
// message is delivered: with the pulls one after another (ResyncPulls 1,
// what the client did before) and a few at a time; with the default budget
// of frames (100 a second, bursts of 100: 300 pulls take 2 s of it) and
// with one that does not pace them.
func BenchmarkReconnectCatchUp(b *testing.B) {
	const n, rtt = 300, 20 * time.Millisecond
	for _, paced := range []bool{false, true} {
		for _, pulls := range []int{1, 2, 4, 8, 16} {
			b.Run(fmt.Sprintf("paced=%v/pulls=%d", paced, pulls), func(b *testing.B) {
				p := newPeer(b, manyGroups(n))
				rec := &recorder{}
				cfg := Config{URL: p.url, OnMessage: rec.on, ResyncPulls: pulls,
					MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
					Token: func(context.Context) (string, error) { return "alice", nil }}
				if !paced {
					cfg.FrameRate, cfg.FrameBurst = 1e6, 1e6
				}
				c, err := Dial(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				for i := range n {
					p.post(fmt.Sprint("g", i), "bob", "before")
				}
				for rec.len() < n {
					time.Sleep(time.Millisecond)
				}
				want := n
				for b.Loop() {
					b.StopTimer()
					p.set(func(p *peer) { p.refuse = true })
					p.kill()
					for i := range n {
						p.post(fmt.Sprint("g", i), "bob", "while away")
					}
					time.Sleep(time.Second) // the budget of frames refills
					want += n
					b.StartTimer()
					p.set(func(p *peer) { p.refuse, p.pullDelay = false, rtt })
					for rec.len() < want {
						time.Sleep(time.Millisecond)
					}
				}
			})
		}
	}
}
