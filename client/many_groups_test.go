package client

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// manyGroups returns n groups of alice and bob, gid "g0" to "g<n-1>".
func manyGroups(n int) map[string][]string {
	groups := make(map[string][]string, n)
	for i := range n {
		groups[fmt.Sprint("g", i)] = []string{"alice", "bob"}
	}
	return groups
}

// A reconnect pulls the opened groups whose heads moved, not every opened
// group: a user who opened 300 groups over the day, of which 3 got
// messages while the connection was down, made 300 pulls, one after
// another, each a round trip and a frame of the client's budget (100 a
// second): 3 s before the last group was current, for 3 messages.
func TestAReconnectPullsOnlyTheOpenedGroupsWithNewMessages(t *testing.T) {
	const n = 300
	p := newPeer(t, manyGroups(n))
	c, rec := dial(t, p, "alice", func(c *Config) { c.FrameRate, c.FrameBurst = 1e6, 1e6 })
	for i := range n {
		p.post(fmt.Sprint("g", i), "bob", "hello")
	}
	for i := range n {
		if err := c.Open(context.Background(), fmt.Sprint("g", i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a message of every group", func() bool { return rec.len() == n })
	before := len(p.requests(protocol.OpPull))

	p.set(func(p *peer) { p.refuse = true })
	p.kill()
	for i := range 3 {
		p.post(fmt.Sprint("g", i*100), "bob", "while away")
	}
	p.set(func(p *peer) { p.refuse = false })
	waitFor(t, "the messages sent while away", func() bool { return rec.len() == n+3 })
	time.Sleep(100 * time.Millisecond) // the resync's pulls, if more, are made by now
	rec.check(t)
	if pulls := len(p.requests(protocol.OpPull)) - before; pulls > 3 {
		t.Errorf("the reconnect pulled %d times for 3 groups of %d opened with new messages; want 3", pulls, n)
	}
}

// processCPU is this process's CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDeliveryAmongManyGroups delivers messages one at a time into
// 100 of the user's groups while the client holds 1,000, 5,000 or 20,000:
// what a delivered message costs the client (and the in-memory peer, the
// same at every size) as its groups grow.
func BenchmarkDeliveryAmongManyGroups(b *testing.B) {
	for _, n := range []int{1000, 5000, 20000} {
		b.Run(fmt.Sprint("groups=", n), func(b *testing.B) {
			p := newPeer(b, manyGroups(n))
			rec := &recorder{}
			c, err := Dial(context.Background(), Config{URL: p.url, OnMessage: rec.on,
				Token: func(context.Context) (string, error) { return "alice", nil }})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			cpu0 := processCPU()
			i := 0
			for b.Loop() {
				p.post(fmt.Sprint("g", i%100), "bob", "hi")
				i++
				for rec.len() < i {
					time.Sleep(20 * time.Microsecond)
				}
			}
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(i), "cpu-us/msg")
		})
	}
}
