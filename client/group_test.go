package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// A pull that stopped for a full queue goes on as OnMessage drains it; if
// the server refuses it for a while (unavailable...), it is pulled again
// after a back-off, not given up.
func TestAPullResumedAfterAFullQueueIsPulledAgainWhenRefused(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	var want []string
	for i := range 100 {
		p.post("g1", "bob", fmt.Sprint(i))
		want = append(want, fmt.Sprint(i))
	}
	release := make(chan struct{})
	c, rec := dial(t, p, "alice", func(cfg *Config) {
		cfg.PageSize, cfg.MaxQueued = 10, 20
		on := cfg.OnMessage
		cfg.OnMessage = func(m protocol.Message) {
			<-release
			on(m)
		}
	})
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatal(err)
	}
	p.set(func(p *peer) { p.refusePulls, p.pullRefusal = 2, protocol.CodeUnavailable })
	close(release)
	waitFor(t, "every message", func() bool { return rec.len() == 100 })
	if got := rec.bodies("g1"); !slices.Equal(got, want) {
		t.Fatalf("%d messages delivered, not the 100 in order", len(got))
	}
}

// Open blocks until it succeeds, fails for good or its ctx ends. A pull the
// server refuses for a while (unavailable...) is made again after a
// back-off: Open returns once the messages are queued, not with the first
// refusal, which leaves the group unpulled until the next reconnect.
func TestOpenPullsAgainWhenRefusedForAWhile(t *testing.T) {
	for _, code := range []protocol.Code{protocol.CodeUnavailable, protocol.CodeInternal, protocol.CodeRateLimited} {
		t.Run(string(code), func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
			c, rec := dial(t, p, "alice", nil)
			p.set(func(p *peer) { p.dropPush = func(protocol.Message) bool { return true } }) // Open brings them
			for i := range 3 {
				p.post("g1", "bob", fmt.Sprint(i))
			}
			p.set(func(p *peer) { p.refusePulls, p.pullRefusal = 2, code })
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.Open(ctx, "g1"); err != nil {
				t.Fatalf("Open refused twice with %s, then answered: %v", code, err)
			}
			waitFor(t, "the 3 messages", func() bool { return rec.len() == 3 })
			if n := len(p.requests(protocol.OpPull)); n != 3 {
				t.Fatalf("%d pulls, want 3: two refused, one answered", n)
			}
		})
	}
}

// Pushes wait in the group's buffer while a gap before them stays open (a
// lost push, and a store that lags behind the pushes: its persister down
// for a few minutes). Each push, and the gap's filling, must cost about
// one step per message, not a scan of the whole buffer: 20,000 waiting
// pushes took 6.7 s of scans under the client's lock (40,000: 32 s),
// holding up delivery, acks and the connection's reader. The test checks
// the order; BenchmarkALongGap shows the cost.
func TestALongGapBuffersAndDrainsPushesInOrder(t *testing.T) {
	longGap(t, 20_000)
}

// BenchmarkALongGap times longGap: 22.7 ms for 20,000 pushes here (the
// form that scanned the buffer took 6.7 s). go test ./client -run '^$'
// -bench ALongGap
func BenchmarkALongGap(b *testing.B) {
	for range b.N {
		longGap(b, 20_000)
	}
}

// longGap buffers n pushes behind a gap, then fills it, and checks that
// all of them are queued in order.
func longGap(t testing.TB, n int) {
	t.Helper()
	c := &Client{groups: map[string]*group{}, named: map[string]bool{"g": true}, deliverKick: make(chan struct{}, 1), closing: true} // named by the last sync; closing: no puller
	// Every push held.
	c.cfg.MaxQueued = n + 1
	c.cfg.setDefaults()
	c.log = c.cfg.Logger
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groupLocked("g")
	g.contig, g.delivered, g.acked = 0, 0, 0
	for id := int64(2); id < int64(n)+2; id++ {
		prev := id - 1
		c.pushLocked(protocol.Message{Gid: "g", MsgID: id, Prev: &prev}) // after the gap at 1
	}
	c.pushLocked(protocol.Message{Gid: "g", MsgID: int64(n / 2)}) // again, prev unknown
	if len(c.queue) != 0 || len(g.buf) != n {
		t.Fatalf("%d queued, %d buffered before the gap is filled; want 0 and %d", len(c.queue), len(g.buf), n)
	}
	zero := int64(0)
	c.pushLocked(protocol.Message{Gid: "g", MsgID: 1, Prev: &zero})
	if len(c.queue) != n+1 || len(g.buf) != 0 || g.contig != int64(n)+1 {
		t.Fatalf("%d queued, %d buffered, contiguous up to %d; want %d, 0, %d", len(c.queue), len(g.buf), g.contig, n+1, n+1)
	}
	for i, m := range c.queue {
		if m.MsgID != int64(i+1) {
			t.Fatalf("queue[%d] is msgid %d, want %d", i, m.MsgID, i+1)
		}
	}
}

// A server that names new groups in every sync answer must not grow the
// client without bound: a group the latest sync does not name, of which
// nothing waits (no message buffered or queued, no ack or read to send, no
// pull, not opened), is forgotten. One named again starts at the server's
// cursors, so nothing is delivered twice.
func TestGroupsTheLatestSyncDoesNotNameAreForgotten(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"alice", "bob"}})
	var syncs int
	p.set(func(p *peer) {
		p.extraGroups = func(string) []protocol.GroupState {
			syncs++
			gs := make([]protocol.GroupState, 1000)
			for i := range gs {
				gs[i] = protocol.GroupState{Gid: fmt.Sprintf("s%d-%d", syncs, i), Head: 5, Ack: 5, Read: 5}
			}
			return gs
		}
	})
	c, rec := dial(t, p, "alice", nil)
	if err := c.Open(context.Background(), "g2"); err != nil {
		t.Fatal(err)
	}
	p.post("g1", "bob", "one")
	waitFor(t, "g1's message acked", func() bool { a, _ := c.Cursor("g1"); return a >= 0 })
	reconnect := func(n int64) {
		t.Helper()
		p.kill()
		waitFor(t, "the reconnect", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.stats.Reconnects == n && c.sess != nil
		})
	}
	for i := range int64(5) {
		reconnect(i + 1)
	}
	c.mu.Lock()
	n := len(c.groups)
	c.mu.Unlock()
	if n > 1000+2 {
		t.Fatalf("after 6 syncs of 1,000 new groups each, the client keeps %d groups; want the latest sync's 1,000 and g1, g2", n)
	}

	// g1 and g2 no longer named: g1 is forgotten, g2 (opened) kept.
	p.set(func(p *peer) { p.groups["g1"].members["alice"], p.groups["g2"].members["alice"] = false, false })
	reconnect(6)
	if a, ct := c.Cursor("g1"); a != -1 || ct != -1 {
		t.Fatalf("g1, not named by the latest sync and settled: cursors %d, %d; want it forgotten", a, ct)
	}
	c.mu.Lock()
	g2 := c.groups["g2"]
	c.mu.Unlock()
	if g2 == nil {
		t.Fatal("g2, opened, was forgotten")
	}
	// Named again: it starts at the server's cursors, and its next message
	// is delivered once, its first not again.
	p.set(func(p *peer) { p.groups["g1"].members["alice"], p.groups["g2"].members["alice"] = true, true })
	reconnect(7)
	p.post("g1", "bob", "two")
	waitFor(t, "g1's second message", func() bool { return len(rec.bodies("g1")) == 2 })
	// What the push of "two" made the client deliver, or pull, comes
	// before a later message on the same connection.
	if got := rec.bodiesAfter(t, p, "g1", "three"); !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Fatalf("g1 delivered %q, want [one two three]", got)
	}
	rec.check(t)
}

// Pushes that wait behind a gap are held up to MaxQueued per group: past
// it they are dropped, as the pull that closes the gap brings them again.
// A server whose pulls fail (or that pushes gaps on purpose) must not fill
// the client's memory with them; and those not held are pulled even once
// the gap before the held ones is closed.
func TestPushesBehindAGapAreHeldUpToMaxQueued(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", func(cfg *Config) { cfg.MaxQueued = 100 })
	p.set(func(p *peer) { p.prevUnknown, p.refusePulls, p.pullRefusal = true, 1<<30, protocol.CodeUnavailable })
	var want []string
	for i := range 1000 {
		p.post("g1", "bob", fmt.Sprint(i))
		want = append(want, fmt.Sprint(i))
	}
	waitFor(t, "the pushes", func() bool { st := c.Stats(); return st.Pushes == 1000 })
	c.mu.Lock()
	held := len(c.groups["g1"].buf)
	c.mu.Unlock()
	if held > 100 {
		t.Fatalf("%d pushes held behind the gap; want at most MaxQueued (100)", held)
	}
	// The store lags: pulls bring the messages held, not those after.
	held100 := p.msgs("g1")[99].MsgID
	p.set(func(p *peer) { p.refusePulls, p.lagTo = 0, held100 })
	waitFor(t, "the messages held", func() bool { return rec.len() == 100 })
	// Two pulls after the held ones: the first was answered, with nothing
	// new, while the store still lagged; the gap was still pulled again.
	waitFor(t, "the gap after the held messages pulled twice", func() bool {
		n := 0
		for _, r := range p.requests(protocol.OpPull) {
			if r.After != nil && *r.After == held100 {
				n++
			}
		}
		return n >= 2
	})
	p.set(func(p *peer) { p.lagTo = -1 }) // the ones not held are pulled still
	waitFor(t, "every message", func() bool { return rec.len() == 1000 })
	if got := rec.bodies("g1"); !slices.Equal(got, want) {
		t.Fatalf("delivered %d messages, not the 1,000 in order", len(got))
	}
}

// Pushes of groups the user is not in (a faulty server) make groups of the
// client, whose pulls the server refuses as not_member: those groups are
// forgotten then, not kept until the next sync, which a server that never
// ends the connection never makes.
func TestGroupsWhosePullIsRefusedForGoodAreForgotten(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, _ := dial(t, p, "alice", func(c *Config) { c.FrameRate, c.FrameBurst = 1e6, 1000 }) // the pulls unpaced: 10 s at the default rate
	var msgs []protocol.Message
	for i := range 1000 {
		msgs = append(msgs, protocol.Message{Gid: fmt.Sprintf("x%d", i), MsgID: 7, Sender: "mallory", Body: "hi"})
	}
	p.pushRaw("alice", msgs...)
	waitFor(t, "the pulls", func() bool { return len(p.requests(protocol.OpPull)) == 1000 })
	waitFor(t, "the groups forgotten", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.groups) == 1
	})
}

// A resync of a connection that ended may still be pulling its groups
// while the next connection's sync forgets one: its pull must not make the
// group again at the member's start, where a later sync naming it would
// find it and leave it there (its messages up to the ack cursor delivered
// again on the next push).
func TestAPullOfAnEndedConnectionMakesNoForgottenGroupAgain(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	p.post("g1", "bob", "one")
	waitFor(t, "g1's message acked", func() bool { a, _ := c.Cursor("g1"); return a >= 0 })
	c.mu.Lock()
	old := c.sess
	c.mu.Unlock()
	p.set(func(p *peer) { p.groups["g1"].members["alice"] = false })
	p.kill()
	waitFor(t, "g1 forgotten", func() bool { _, ct := c.Cursor("g1"); return ct == -1 })
	_ = c.pullGroup(context.Background(), old, "g1") // the old connection's resync, late
	p.set(func(p *peer) { p.groups["g1"].members["alice"] = true })
	p.kill()
	waitFor(t, "g1 named again", func() bool { a, _ := c.Cursor("g1"); return a >= 0 })
	p.post("g1", "bob", "two")
	waitFor(t, "g1's second message", func() bool { return slices.Contains(rec.bodies("g1"), "two") })
	// What the push of "two" made the client deliver, or pull, comes
	// before a later message on the same connection.
	if got := rec.bodiesAfter(t, p, "g1", "three"); !slices.Equal(got, []string{"one", "two", "three"}) {
		t.Fatalf("g1 delivered %q, want [one two three]", got)
	}
}

// A server pushing new gids on one long connection (a fault, or groups
// joined since) makes groups no sync named: the client keeps at most
// MaxUnnamedGroups of them until the next sync and drops the pushes of
// others. Before, every gid pushed was kept until then. A group joined
// meanwhile, whose push was dropped, is brought by the sync that names it
// and its pull.
func TestGroupsNoSyncNamedAreBoundedUntilTheNextSync(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"bob"}})
	c, rec := dial(t, p, "alice", func(c *Config) { c.FrameRate, c.FrameBurst = 1e6, 1000 }) // the acks of 1,000 groups unpaced: 10 s at the default rate
	none := int64(-1)
	for i := range 4 {
		var msgs []protocol.Message
		for j := range 500 {
			msgs = append(msgs, protocol.Message{Gid: fmt.Sprintf("x%d", i*500+j), MsgID: 7, Prev: &none, Sender: "mallory", Body: "hi"})
		}
		p.pushRaw("alice", msgs...)
	}
	waitFor(t, "the pushes", func() bool { return c.Stats().Pushes == 2000 })
	c.mu.Lock()
	n := len(c.groups)
	c.mu.Unlock()
	if st := c.Stats(); n > MaxUnnamedGroups+1 || st.UnnamedDrops != 2000-MaxUnnamedGroups {
		t.Fatalf("after pushes of 2,000 gids no sync named, the client keeps %d groups and dropped %d pushes; want g1 and %d others, %d dropped",
			n, st.UnnamedDrops, MaxUnnamedGroups, 2000-MaxUnnamedGroups)
	}

	p.set(func(p *peer) {
		g := p.groups["g2"]
		g.members["alice"] = true
		g.acks["alice"], g.reads["alice"] = -1, -1
	})
	p.post("g2", "bob", "hello")
	waitFor(t, "the push of g2", func() bool { return c.Stats().Pushes == 2001 })
	if _, contig := c.Cursor("g2"); contig != -1 {
		t.Fatalf("g2's push was taken (cursor %d) past MaxUnnamedGroups", contig)
	}
	p.resync("alice")
	waitFor(t, "g2 named by a sync", func() bool {
		return slices.ContainsFunc(c.Groups(), func(gs protocol.GroupState) bool { return gs.Gid == "g2" })
	})
	if err := c.Open(context.Background(), "g2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "g2's message", func() bool { return slices.Equal(rec.bodies("g2"), []string{"hello"}) })
}

// Pushes held behind a gap in a group no sync named are at most
// MaxUnnamedHeld, not MaxQueued: the others are dropped and pulled once
// the server answers pulls. Before, each such group held up to MaxQueued.
func TestPushesOfAGroupNoSyncNamedAreHeldUpToMaxUnnamedHeld(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"bob"}})
	c, rec := dial(t, p, "alice", nil)
	p.set(func(p *peer) {
		g := p.groups["g2"]
		g.members["alice"] = true
		g.acks["alice"], g.reads["alice"] = -1, -1
		p.prevUnknown, p.refusePulls, p.pullRefusal = true, 1<<30, protocol.CodeUnavailable
	})
	var want []string
	for i := range 100 {
		p.post("g2", "bob", fmt.Sprint(i))
		want = append(want, fmt.Sprint(i))
	}
	waitFor(t, "the pushes", func() bool { return c.Stats().Pushes == 100 })
	c.mu.Lock()
	held := len(c.groups["g2"].buf)
	c.mu.Unlock()
	if held > MaxUnnamedHeld {
		t.Fatalf("%d pushes held behind a gap of a group no sync named; want at most MaxUnnamedHeld (%d)", held, MaxUnnamedHeld)
	}
	p.set(func(p *peer) { p.refusePulls = 0 })
	waitFor(t, "every message", func() bool { return rec.len() == 100 })
	if got := rec.bodies("g2"); !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want the 100 in order", got)
	}
}

// A resend the gateway wrote twice is two records of one send. The
// persister keeps the first only; the fan-out drops the second only while
// it remembers the first (not across a new assignment), and may push it:
// the application must see the send once, and the group go on past it.
func TestASendWrittenTwiceIsHandedOnce(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	send := func(cmid, body string) protocol.Message {
		p.pushMu.Lock()
		defer p.pushMu.Unlock()
		p.mu.Lock()
		m := p.appendLocked("g1", "bob", body, cmid)
		p.mu.Unlock()
		p.push(m)
		return m
	}
	send("b-1", "hello")
	send("b-1", "hello") // the second record of the same send
	last := send("b-2", "later")
	waitFor(t, "later", func() bool { return slices.Contains(rec.bodies("g1"), "later") })
	if got, want := rec.bodies("g1"), []string{"hello", "later"}; !slices.Equal(got, want) {
		t.Fatalf("handed %q, want %q: one send shown twice", got, want)
	}
	if s := c.Stats(); s.Duplicates != 1 {
		t.Errorf("Stats().Duplicates = %d, want 1", s.Duplicates)
	}
	waitFor(t, "the ack past both records", func() bool {
		acks := p.requests(protocol.OpAck)
		return len(acks) > 0 && *acks[len(acks)-1].Upto == last.MsgID
	})
}

// An Open the server refuses for good (a group the user is not in: a typo,
// or one they were removed from) fails and leaves nothing behind: the
// group was kept opened, pulled again (and refused again) on every
// reconnect, never forgotten, and counted among the groups no sync named.
func TestAnOpenRefusedForGoodIsForgotten(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, _ := dial(t, p, "alice", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Open(ctx, "typo"); err == nil || !strings.Contains(err.Error(), string(protocol.CodeNotMember)) {
		t.Fatalf("Open of a group alice is not in: %v, want not_member", err)
	}
	c.mu.Lock()
	_, held := c.groups["typo"]
	c.mu.Unlock()
	if held {
		t.Fatal("the group refused for good is still held")
	}
	pulls := len(p.requests(protocol.OpPull))
	p.cut(websocket.StatusGoingAway, "test: reconnect")
	waitFor(t, "a new sync", func() bool { return len(p.requests(protocol.OpSync)) >= 2 })
	time.Sleep(300 * time.Millisecond) // the resync's pulls, had there been any
	for _, r := range p.requests(protocol.OpPull)[pulls:] {
		if r.Gid == "typo" {
			t.Fatal("the group refused for good was pulled again after the reconnect")
		}
	}
}

// Pushes that come while OnMessage is stuck wait in memory up to twice
// MaxQueued; the rest are pulled once it catches up. A server pushing
// faster than OnMessage takes them (or a flood) grew the client's queue
// without bound: pulls stop at MaxQueued, pushes did not.
func TestPushesWhileOnMessageIsStuckWaitUpToABound(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	release := make(chan struct{})
	c, rec := dial(t, p, "alice", func(cfg *Config) {
		cfg.MaxQueued = 10
		on := cfg.OnMessage
		cfg.OnMessage = func(m protocol.Message) {
			<-release
			on(m)
		}
	})
	var once sync.Once
	unstick := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstick) // before the client's Close, which waits for OnMessage
	var want []string
	for i := range 100 {
		p.post("g1", "bob", fmt.Sprint(i))
		want = append(want, fmt.Sprint(i))
	}
	waitFor(t, "the pushes taken", func() bool { return c.Stats().Pushes >= 100 })
	c.mu.Lock()
	queued, held := len(c.queue), c.held
	c.mu.Unlock()
	if queued > 20 || held > 20 {
		t.Fatalf("with OnMessage stuck, 100 pushes left %d queued and %d held; want at most 2 × MaxQueued (20) each", queued, held)
	}
	unstick()
	waitFor(t, "every message", func() bool { return rec.len() == 100 })
	if got := rec.bodies("g1"); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want the 100 in order", got)
	}
}
