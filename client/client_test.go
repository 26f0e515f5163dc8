package client

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	// The fuzzing engine leaves its signal handler running: no leak check
	// when fuzzing.
	if f := flag.Lookup("test.fuzz"); code == 0 && (f == nil || f.Value.String() == "") {
		if err := noLeak(before, 5*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// noLeak waits until at most n goroutines run.
func noLeak(n int, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			var b bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			return fmt.Errorf("goroutine leak: %d running, want <= %d\n%s", runtime.NumGoroutine(), n, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// recorder collects OnMessage calls.
type recorder struct {
	mu   sync.Mutex
	msgs []protocol.Message
}

func (r *recorder) on(m protocol.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
}

func (r *recorder) bodies(gid string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		if m.Gid == gid {
			out = append(out, m.Body)
		}
	}
	return out
}

// bodiesAfter has bob post body to gid, a later message on the same
// connection, waits until it is delivered and returns gid's bodies: by
// then whatever the messages before it made the client deliver, by push
// or pull, is delivered too.
func (r *recorder) bodiesAfter(t *testing.T, p *peer, gid, body string) []string {
	t.Helper()
	p.post(gid, "bob", body)
	waitFor(t, gid+"'s message "+body, func() bool { return slices.Contains(r.bodies(gid), body) })
	return r.bodies(gid)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// check fails unless every group's messages came once each, in msgid order.
func (r *recorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	last := map[string]int64{}
	for _, m := range r.msgs {
		if l, ok := last[m.Gid]; ok && m.MsgID <= l {
			t.Errorf("group %s: msgid %d delivered after %d", m.Gid, m.MsgID, l)
		}
		last[m.Gid] = m.MsgID
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dial connects uid to p with fast test timings, adjusted by edit.
func dial(t *testing.T, p *peer, uid string, edit func(*Config)) (*Client, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg := Config{
		URL:         p.url,
		Token:       func(context.Context) (string, error) { return uid, nil },
		AckInterval: 50 * time.Millisecond,
		SendTimeout: time.Second,
		MinBackoff:  5 * time.Millisecond,
		MaxBackoff:  50 * time.Millisecond,
		OnMessage:   rec.on,
		OnError:     func(err error) { t.Logf("%s: OnError: %v", uid, err) },
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, rec
}

func TestDedupRepeatedPushes(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	m1 := p.post("g1", "bob", "one")
	m2 := p.post("g1", "bob", "two")
	waitFor(t, "two messages", func() bool { return rec.len() == 2 })

	p.pushRaw("alice", m2)             // a repeated push
	p.pushRaw("alice", m1, m2)         // and older ones
	m3 := p.post("g1", "bob", "three") // a barrier: pushes are in order
	waitFor(t, "three messages", func() bool { return rec.len() == 3 })

	// The client's own message comes by push too, once.
	id, err := c.Send(context.Background(), "g1", "mine")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "own message", func() bool { return rec.len() == 4 })
	own := p.msgs("g1")[3]
	if own.MsgID != id {
		t.Fatalf("Send returned %d, log has %d", id, own.MsgID)
	}
	p.pushRaw("alice", own, m3)
	p.post("g1", "bob", "five")
	waitFor(t, "five messages", func() bool { return rec.len() == 5 })

	if got, want := rec.bodies("g1"), []string{"one", "two", "three", "mine", "five"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	rec.check(t)
	if st := c.Stats(); st.Duplicates != 5 || st.Pulls != 0 || st.Gaps != 0 {
		t.Fatalf("stats %+v: want 5 duplicates, no pull, no gap", st)
	}
}

func TestGapPullsBeforeDeliver(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) {
		p.dropPush = func(m protocol.Message) bool { return m.Body == "two" || m.Body == "three" }
	})
	c, rec := dial(t, p, "alice", nil)
	m1 := p.post("g1", "bob", "one")
	waitFor(t, "first message", func() bool { return rec.len() == 1 })
	p.post("g1", "bob", "two")
	p.post("g1", "bob", "three")
	p.post("g1", "bob", "four") // prev is "three", which alice never got
	waitFor(t, "four messages", func() bool { return rec.len() == 4 })

	if got, want := rec.bodies("g1"), []string{"one", "two", "three", "four"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	rec.check(t)
	pulls := p.requests(protocol.OpPull)
	if len(pulls) != 1 || pulls[0].After == nil || *pulls[0].After != m1.MsgID {
		t.Fatalf("pulls %+v: want one after %d", pulls, m1.MsgID)
	}
	if st := c.Stats(); st.Gaps != 1 || st.Pulled != 3 || st.Duplicates != 1 {
		t.Fatalf("stats %+v: want 1 gap, 3 pulled, 1 duplicate (the buffered push)", st)
	}
}

func TestPrevUnknownPulls(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	m1 := p.post("g1", "bob", "one")
	p.set(func(p *peer) { p.prevUnknown = true }) // the fan-out restarted
	c, rec := dial(t, p, "alice", nil)
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "history", func() bool { return rec.len() == 1 })
	p.post("g1", "bob", "two")
	waitFor(t, "second message", func() bool { return rec.len() == 2 })

	if got, want := rec.bodies("g1"), []string{"one", "two"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	pulls := p.requests(protocol.OpPull)
	if len(pulls) != 2 || *pulls[1].After != m1.MsgID {
		t.Fatalf("pulls %+v: want the open and one after %d", pulls, m1.MsgID)
	}
	if st := c.Stats(); st.Gaps != 1 {
		t.Fatalf("stats %+v: want 1 gap", st)
	}
}

func TestReconnectSyncPull(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"alice", "bob"}, "g3": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatal(err)
	}
	p.post("g1", "bob", "g1-one")
	p.post("g2", "bob", "g2-one") // g2 is seen by push, not opened
	waitFor(t, "two messages", func() bool { return rec.len() == 2 })

	p.set(func(p *peer) { p.refuse = true })
	p.kill()
	p.post("g1", "bob", "g1-two")
	p.post("g1", "bob", "g1-three")
	p.post("g2", "bob", "g2-two")
	p.post("g3", "bob", "g3-one") // never seen: counted, not pulled
	time.Sleep(30 * time.Millisecond)
	p.set(func(p *peer) { p.refuse = false })

	waitFor(t, "missed messages", func() bool { return rec.len() == 5 })
	if got, want := rec.bodies("g1"), []string{"g1-one", "g1-two", "g1-three"}; !slices.Equal(got, want) {
		t.Fatalf("g1 delivered %q, want %q", got, want)
	}
	if got, want := rec.bodies("g2"), []string{"g2-one", "g2-two"}; !slices.Equal(got, want) {
		t.Fatalf("g2 delivered %q, want %q", got, want)
	}
	rec.check(t)
	if st := c.Stats(); st.Reconnects != 1 {
		t.Fatalf("stats %+v: want 1 reconnect", st)
	}
	for _, r := range p.requests(protocol.OpPull) {
		if r.Gid == "g3" {
			t.Fatal("g3 was pulled without being opened")
		}
	}
	var g3 protocol.GroupState
	for _, g := range c.Groups() {
		if g.Gid == "g3" {
			g3 = g
		}
	}
	if g3.Unread != 1 {
		t.Fatalf("g3 state %+v: want 1 unread", g3)
	}
	// Live pushes flow again.
	p.post("g3", "bob", "g3-two")
	waitFor(t, "g3 after the gap", func() bool { return len(rec.bodies("g3")) == 2 })
}

func TestCutByServerResyncs(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	var mu sync.Mutex
	var errs []error
	c, rec := dial(t, p, "alice", func(c *Config) {
		c.PingInterval = 5 * time.Millisecond // pings answered: no reconnect from them
		c.OnError = func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	})
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatal(err)
	}
	p.post("g1", "bob", "one")
	waitFor(t, "first message", func() bool { return rec.len() == 1 })
	time.Sleep(50 * time.Millisecond)
	if st := c.Stats(); st.Reconnects != 0 {
		t.Fatalf("stats %+v: pings made the client reconnect", st)
	}

	p.set(func(p *peer) { p.dropPush = func(protocol.Message) bool { return true } }) // the slow client misses pushes
	p.post("g1", "bob", "two")
	p.cut(websocket.StatusPolicyViolation, "too slow")
	p.set(func(p *peer) { p.dropPush = nil })
	waitFor(t, "the missed message", func() bool { return rec.len() == 2 })
	if got, want := rec.bodies("g1"), []string{"one", "two"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) == 0 || !errors.Is(errs[0], ErrDisconnected) || !strings.Contains(errs[0].Error(), "too slow") {
		t.Fatalf("OnError got %v, want a disconnect with the server's reason", errs)
	}
}

func TestOpenPullsPages(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	var ms []protocol.Message
	for i := range 8 {
		ms = append(ms, p.post("g1", "bob", fmt.Sprint(i)))
	}
	p.set(func(p *peer) { p.groups["g1"].acks["alice"] = ms[0].MsgID }) // an earlier client acked the first
	c, rec := dial(t, p, "alice", func(c *Config) { c.PageSize = 3 })
	if acked, contig := c.Cursor("g1"); acked != ms[0].MsgID || contig != ms[0].MsgID {
		t.Fatalf("Cursor after login (%d, %d), want the server's ack %d", acked, contig, ms[0].MsgID)
	}
	if n := len(p.requests(protocol.OpPull)); n != 0 {
		t.Fatalf("%d pulls at login; login fetches counts only", n)
	}
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "7 messages", func() bool { return rec.len() == 7 })
	if got, want := rec.bodies("g1"), []string{"1", "2", "3", "4", "5", "6", "7"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if n := len(p.requests(protocol.OpPull)); n != 3 {
		t.Fatalf("%d pulls, want 3 pages of 3", n)
	}
}

// Pushes that arrive while a page is on its way can bring all of the
// page's messages first: the page then brings nothing new, and the pull
// goes on from where the pushes left the cursor, without an error.
func TestAPageThePushesOvertookIsNotAnError(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	var ms []protocol.Message
	for i := range 5 {
		ms = append(ms, p.post("g1", "bob", fmt.Sprint(i)))
	}
	p.set(func(p *peer) {
		p.groups["g1"].acks["alice"] = ms[0].MsgID
		p.pushBeforePage = func(after int64) []protocol.Message {
			if after == ms[0].MsgID {
				return ms[1:3] // the first page's two messages, with their prev
			}
			return nil
		}
	})
	c, rec := dial(t, p, "alice", func(c *Config) { c.PageSize = 2 })
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatalf("Open: %v", err)
	}
	waitFor(t, "4 messages", func() bool { return rec.len() == 4 })
	if got, want := rec.bodies("g1"), []string{"1", "2", "3", "4"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}

func TestPushBeforeSyncWaitsForCursor(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	m1 := p.post("g1", "bob", "one")
	p.set(func(p *peer) { p.groups["g1"].acks["alice"] = m1.MsgID })
	p.set(func(p *peer) {
		m2 := p.appendLocked("g1", "bob", "two", "")
		p.earlyPush = []protocol.Message{m2} // pushed between authed and synced
	})
	c, rec := dial(t, p, "alice", nil)
	waitFor(t, "early push", func() bool { return rec.len() == 1 })
	if got := rec.bodies("g1"); got[0] != "two" {
		t.Fatalf("delivered %q, want [two]", got)
	}
	if st := c.Stats(); st.Pulls != 0 || st.Gaps != 0 {
		t.Fatalf("stats %+v: the push follows the synced cursor, want no pull", st)
	}
}

func TestDialBadToken(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice"}})
	_, err := Dial(context.Background(), Config{URL: p.url, Token: func(context.Context) (string, error) { return "bad", nil }})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeBadToken {
		t.Fatalf("Dial with a forged token: %v, want bad_token", err)
	}
}

// A session that ends as its sync answer is applied never becomes the
// ready session: sends would spin on it, and the next connection's sync
// would close the ready channel a second time (a panic).
func TestASessionEndedAsItSyncsIsNotMadeReady(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, _ := dial(t, p, "alice", nil)
	c.mu.Lock()
	ready := c.sess
	c.mu.Unlock()
	late := &session{c: c, done: make(chan struct{})}
	c.detach(late) // it ended, its done not yet closed
	if err := c.applySync(late, nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("applySync of an ended session: %v, want ErrDisconnected", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != ready {
		t.Fatal("the ended session replaced the ready one")
	}
}

// Open pulls no further than MaxQueued messages ahead of OnMessage; the
// rest is pulled as OnMessage takes them, in order. An Open called from
// OnMessage itself returns rather than wait for it.
func TestOpenHoldsNoMoreThanMaxQueued(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"alice", "bob"}})
	var want []string
	for i := range 3000 {
		p.post("g1", "bob", fmt.Sprint(i))
		want = append(want, fmt.Sprint(i))
	}
	p.post("g2", "bob", "x")
	release := make(chan struct{})
	var c *Client
	var rec *recorder
	c, rec = dial(t, p, "alice", func(cfg *Config) {
		cfg.PageSize, cfg.MaxQueued = 100, 500
		on := cfg.OnMessage
		cfg.OnMessage = func(m protocol.Message) {
			if m.Body == "0" {
				<-release
				if err := c.Open(context.Background(), "g2"); err != nil { // from OnMessage, with a full queue
					t.Errorf("Open from OnMessage: %v", err)
				}
			}
			on(m)
		}
	})
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	queued := len(c.queue)
	c.mu.Unlock()
	if queued > 500+100 {
		t.Fatalf("%d messages queued while OnMessage takes none; want at most MaxQueued and a page (600)", queued)
	}
	close(release)
	waitFor(t, "every message of g1 and g2", func() bool { return rec.len() == 3001 })
	if got := rec.bodies("g1"); !slices.Equal(got, want) {
		t.Fatalf("g1: %d messages delivered, not the 3,000 in order", len(got))
	}
}

// A gap wider than MaxQueued: its pull stops for the full queue while a
// push waits behind the gap. Once OnMessage has taken half the queue, the
// pull goes on at once, not after the back-off of a gap the store left open.
func TestAPullStoppedForAFullQueueBehindAGapResumesAtOnce(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	release := make(chan struct{})
	c, rec := dial(t, p, "alice", func(cfg *Config) {
		cfg.PageSize, cfg.MaxQueued = 10, 20
		cfg.MinBackoff, cfg.MaxBackoff = 3*time.Second, 3*time.Second
		on := cfg.OnMessage
		cfg.OnMessage = func(m protocol.Message) {
			if m.Body == "0" {
				<-release
			}
			on(m)
		}
	})
	p.post("g1", "bob", "0")
	waitFor(t, "OnMessage holding the first message", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.groups["g1"] != nil && c.groups["g1"].contig >= 0
	})
	p.set(func(p *peer) { p.dropPush = func(m protocol.Message) bool { return m.Body != "60" } })
	for i := 1; i <= 60; i++ {
		p.post("g1", "bob", fmt.Sprint(i))
	}
	waitFor(t, "the pull stopped for the full queue", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.groups["g1"].later
	})
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	close(release)
	waitFor(t, "every message", func() bool { return rec.len() == 61 })
	if d := time.Since(released); d > 500*time.Millisecond {
		t.Fatalf("the rest of g1 came %v after OnMessage took the queue: the pull waited out a back-off (%d pulls)",
			d.Round(time.Millisecond), len(p.requests(protocol.OpPull)))
	}
	rec.check(t)
}

// Pushes before the sync answer past what memory holds (twice MaxQueued),
// of a group the sync does not name yet (the user was added just before
// and the answer lags): the group is pulled once synced, not left until
// its next push.
func TestPushesBeforeTheSyncPastTheBudgetArePulledAfterIt(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "j": {"alice", "bob"}})
	var want []string
	p.set(func(p *peer) {
		for i := range 4 { // what memory holds before the sync: g1's
			p.earlyPush = append(p.earlyPush, p.appendLocked("g1", "bob", fmt.Sprint(i), ""))
		}
		for i := range 10 {
			m := p.appendLocked("j", "bob", fmt.Sprint(i), "")
			p.earlyPush = append(p.earlyPush, m) // pushed between authed and synced
			want = append(want, fmt.Sprint(i))
		}
		p.syncGroups = `[{"gid":"g1","head":-1,"ack":-1,"read":-1,"unread":0,"unread_exact":true}]` // j not yet
	})
	_, rec := dial(t, p, "alice", func(cfg *Config) { cfg.MaxQueued = 2 }) // 4 kept before the sync
	waitFor(t, "j's messages", func() bool { return len(rec.bodies("j")) == 10 })
	if got := rec.bodies("j"); !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}
