package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

func TestNeverAckPastGap(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.dropPush = func(m protocol.Message) bool { return m.Body == "two" } })
	c, rec := dial(t, p, "alice", func(c *Config) { c.AckEvery, c.AckInterval = 1, 10*time.Millisecond })
	m1 := p.post("g1", "bob", "one")
	waitFor(t, "ack of the first", func() bool { return slices.Contains(p.cursors("ack", "g1", "alice"), m1.MsgID) })

	// The store lags: pulls do not see "two" yet, though "three" was pushed.
	p.set(func(p *peer) { p.lagTo = m1.MsgID })
	p.post("g1", "bob", "two")
	m3 := p.post("g1", "bob", "three")
	waitFor(t, "pull retries", func() bool { return len(p.requests(protocol.OpPull)) >= 3 })
	before := len(p.requests(protocol.OpPull))
	time.Sleep(250 * time.Millisecond)
	// Backed off up to MaxBackoff (50 ms) between pulls: a handful, not a busy loop.
	if n := len(p.requests(protocol.OpPull)) - before; n > 15 {
		t.Fatalf("%d pulls in 250 ms while the store lagged: the gap is pulled again without backing off", n)
	}
	if got := p.cursors("ack", "g1", "alice"); slices.Max(got) != m1.MsgID {
		t.Fatalf("acks %v passed %d while a predecessor of %d was missing", got, m1.MsgID, m3.MsgID)
	}
	if _, contig := c.Cursor("g1"); contig != m1.MsgID || rec.len() != 1 {
		t.Fatalf("contiguous cursor %d, %d delivered: want %d and 1", contig, rec.len(), m1.MsgID)
	}

	p.set(func(p *peer) { p.lagTo = -1 }) // the store catches up
	waitFor(t, "ack of the third", func() bool { return slices.Contains(p.cursors("ack", "g1", "alice"), m3.MsgID) })
	if got, want := rec.bodies("g1"), []string{"one", "two", "three"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if acks := p.cursors("ack", "g1", "alice"); !slices.IsSorted(acks) {
		t.Fatalf("acks went backwards: %v", acks)
	}
}

func TestAckEveryN(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", func(c *Config) { c.AckEvery, c.AckInterval = 5, time.Hour })
	var ms []protocol.Message
	for i := range 5 {
		ms = append(ms, p.post("g1", "bob", fmt.Sprint(i)))
	}
	waitFor(t, "ack after 5", func() bool { return len(p.cursors("ack", "g1", "alice")) == 1 })
	if got := p.cursors("ack", "g1", "alice"); got[0] != ms[4].MsgID {
		t.Fatalf("acks %v, want [%d]", got, ms[4].MsgID)
	}
	for i := range 3 {
		ms = append(ms, p.post("g1", "bob", fmt.Sprint(5+i)))
	}
	waitFor(t, "8 messages", func() bool { return rec.len() == 8 })
	time.Sleep(100 * time.Millisecond)
	if got := p.cursors("ack", "g1", "alice"); len(got) != 1 {
		t.Fatalf("acks %v after 3 more messages, want none before 5 or the interval", got)
	}
	if acked, _ := c.Cursor("g1"); acked != ms[4].MsgID {
		t.Fatalf("Cursor acked %d, want %d", acked, ms[4].MsgID)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := p.cursors("ack", "g1", "alice"), []int64{ms[4].MsgID, ms[7].MsgID}; !slices.Equal(got, want) {
		t.Fatalf("acks %v, want %v", got, want)
	}
}

func TestAckInterval(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", func(c *Config) { c.AckEvery, c.AckInterval = 1000, 200*time.Millisecond })
	start := time.Now()
	p.post("g1", "bob", "one")
	p.post("g1", "bob", "two")
	m3 := p.post("g1", "bob", "three")
	waitFor(t, "3 messages", func() bool { return rec.len() == 3 })
	waitFor(t, "ack", func() bool { return len(p.cursors("ack", "g1", "alice")) > 0 })
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("acked after %v, before the interval", d)
	}
	if got := p.cursors("ack", "g1", "alice"); !slices.Equal(got, []int64{m3.MsgID}) {
		t.Fatalf("acks %v, want one of %d", got, m3.MsgID)
	}
	if st := c.Stats(); st.Acks != 1 {
		t.Fatalf("%d ack frames, want 1", st.Acks)
	}
}

func TestMarkRead(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", func(c *Config) { c.AckInterval = 200 * time.Millisecond })
	m1 := p.post("g1", "bob", "one")
	m2 := p.post("g1", "bob", "two")
	waitFor(t, "two messages", func() bool { return rec.len() == 2 })
	ctx := context.Background()
	if err := c.MarkRead(ctx, "g1", m2.MsgID+1); !errors.Is(err, ErrNotReceived) {
		t.Fatalf("MarkRead past the cursor: %v, want ErrNotReceived", err)
	}
	for _, id := range []int64{m1.MsgID, m2.MsgID, m1.MsgID} {
		if err := c.MarkRead(ctx, "g1", id); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "read", func() bool { return len(p.cursors("read", "g1", "alice")) > 0 })
	// Close sends whatever read is still pending and waits for its answer:
	// a second read, due now or later, has reached the peer once it returns.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := p.cursors("read", "g1", "alice"); !slices.Equal(got, []int64{m2.MsgID}) {
		t.Fatalf("reads %v, want one batched read of %d", got, m2.MsgID)
	}
}

// The steps of the package example (example_test.go) mark read what
// OnMessage showed, also when the user's own message has not come back
// yet when Send returns: here its push is lost, and a read that waited for
// it would mark nothing.
func TestTheExampleMarksReadWhatWasShown(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.post("g1", "bob", "one")
	shown := p.post("g1", "bob", "two")
	p.set(func(p *peer) { p.dropPush = func(m protocol.Message) bool { return m.Sender == "alice" } })
	c, rec := dial(t, p, "alice", nil)
	ctx := context.Background()

	if err := c.Open(ctx, "g1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the group's messages shown", func() bool { return rec.len() == 2 })
	if _, err := c.Send(ctx, "g1", "hello"); err != nil {
		t.Fatal(err)
	}
	if _, upto := c.Cursor("g1"); upto >= 0 {
		_ = c.MarkRead(ctx, "g1", upto)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	if got := rec.bodies("g1"); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("shown %q, want one and two", got)
	}
	if got := p.cursors("read", "g1", "alice"); !slices.Equal(got, []int64{shown.MsgID}) {
		t.Fatalf("reads %v, want one read up to %d, the last message shown", got, shown.MsgID)
	}
}

func TestCloseFlushesAcksNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", func(c *Config) { c.AckEvery, c.AckInterval = 1000, time.Hour })
	p.post("g1", "bob", "one")
	m2 := p.post("g1", "bob", "two")
	waitFor(t, "two messages", func() bool { return rec.len() == 2 })
	if err := c.MarkRead(context.Background(), "g1", m2.MsgID); err != nil {
		t.Fatal(err)
	}
	// A Send blocked by a dead server ends with Close.
	p.set(func(p *peer) { p.swallowSends = 1 })
	sendErr := make(chan error, 1)
	go func() { _, err := c.Send(context.Background(), "g1", "late"); sendErr <- err }()
	waitFor(t, "the send", func() bool { return len(p.requests(protocol.OpSend)) == 1 })
	if n := len(p.cursors("ack", "g1", "alice")); n != 0 {
		t.Fatalf("%d acks before Close, want none", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := p.cursors("ack", "g1", "alice"); len(got) != 1 || got[0] < m2.MsgID {
		t.Fatalf("acks %v after Close, want one up to at least %d", got, m2.MsgID)
	}
	if got := p.cursors("read", "g1", "alice"); !slices.Equal(got, []int64{m2.MsgID}) {
		t.Fatalf("reads %v after Close, want [%d]", got, m2.MsgID)
	}
	if err := <-sendErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("Send during Close: %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Send(context.Background(), "g1", "after"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
	p.close()
	if err := noLeak(before, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A read marked from OnMessage, past what was delivered when the next flush
// runs, is sent once OnMessage returns: the part not yet delivered waits for
// delivery, it is not dropped.
func TestMarkReadAheadOfDeliveryIsSentOnceDelivered(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	entered, release := make(chan struct{}), make(chan struct{})
	var c *Client
	c, _ = dial(t, p, "alice", func(cfg *Config) {
		cfg.OnMessage = func(m protocol.Message) {
			if m.Body == "two" {
				if err := c.MarkRead(context.Background(), m.Gid, m.MsgID); err != nil {
					t.Errorf("MarkRead: %v", err)
				}
				close(entered)
				<-release // the app is still showing it
			}
		}
	})
	m1 := p.post("g1", "bob", "one")
	m2 := p.post("g1", "bob", "two")
	<-entered
	waitFor(t, "the read of what was delivered", func() bool {
		return slices.Contains(p.cursors("read", "g1", "alice"), m1.MsgID)
	})
	close(release)
	waitFor(t, "the read of the message being shown", func() bool {
		return slices.Contains(p.cursors("read", "g1", "alice"), m2.MsgID)
	})
}

// A read that another device already covered is not due for ever: the ack
// loop does not wake every millisecond to find nothing to send.
func TestReadCoveredByAnotherDeviceIsNotDueForEver(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	m1 := p.post("g1", "bob", "one")
	m2 := p.post("g1", "bob", "two")
	waitFor(t, "two messages", func() bool { return rec.len() == 2 })
	p.set(func(p *peer) { p.groups["g1"].reads["alice"] = m2.MsgID })
	p.kill()
	waitFor(t, "the reconnect", func() bool { return c.Stats().Reconnects == 1 })
	if err := c.MarkRead(context.Background(), "g1", m1.MsgID); err != nil {
		t.Fatal(err)
	}
	// Several AckIntervals of 50 ms, for the read to become due and go:
	// being due is a matter of time passing, so only time can show it.
	time.Sleep(300 * time.Millisecond)
	if d := c.nextDue(); d < time.Minute {
		t.Fatalf("the next flush is due in %v with nothing to send; want none due", d)
	}
	// Close sends whatever read is still pending and waits for its answer.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := p.cursors("read", "g1", "alice"); len(got) != 0 {
		t.Fatalf("reads sent %v; the server's read cursor (%d) already covered them", got, m2.MsgID)
	}
}

// A gap whose pull is refused for good (the member was removed meanwhile)
// is reported once and dropped with the pushes behind it: the client
// neither delivers past the gap nor pulls the group again and again.
func TestAGapRefusedForGoodIsDropped(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.dropPush = func(m protocol.Message) bool { return m.Body == "two" } })
	var errs atomic.Int32
	c, rec := dial(t, p, "alice", func(c *Config) {
		c.OnError = func(err error) {
			if strings.Contains(err.Error(), "pull g1") {
				errs.Add(1)
			}
		}
	})
	m1 := p.post("g1", "bob", "one")
	waitFor(t, "first message", func() bool { return rec.len() == 1 })
	p.set(func(p *peer) { p.refusePulls, p.pullRefusal = 1000, protocol.CodeNotMember })
	p.post("g1", "bob", "two")
	p.post("g1", "bob", "three") // buffered behind the gap
	waitFor(t, "the refused pull", func() bool { return errs.Load() == 1 })
	// The group's puller makes every pull of the gap and ends only when
	// none is due: once it has ended, a pull made again has been answered
	// (so recorded) and reported. A second pull ends the wait at once.
	waitFor(t, "the puller of g1 to end", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		g := c.groups["g1"]
		return g != nil && !g.puller || len(p.requests(protocol.OpPull)) > 1
	})
	if n := len(p.requests(protocol.OpPull)); n != 1 {
		t.Fatalf("%d pulls of g1 after a not_member refusal, want 1", n)
	}
	if n := errs.Load(); n != 1 {
		t.Fatalf("the refusal was reported %d times, want once", n)
	}
	if _, contig := c.Cursor("g1"); contig != m1.MsgID || rec.len() != 1 {
		t.Fatalf("contiguous cursor %d, %d delivered: want %d and 1", contig, rec.len(), m1.MsgID)
	}
}

// A push of a msgid the group does not have (here the largest int64) whose
// prev is the client's cursor is taken: nothing tells it from a real one.
// The server then refuses its ack as beyond_head, and at that first
// refusal the client takes the group up again from its confirmed ack
// cursor, syncs and pulls: the group's later messages are delivered and
// acked, not dropped as older than the bogus one. It took ten refusals, one
// AckInterval apart; before that, the group was wedged for the life of the
// Client.
func TestAMsgidFarAheadOfTheHeadIsTakenUpAgainAtItsFirstRefusal(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	var refused atomic.Int32
	c, rec := dial(t, p, "alice", func(c *Config) {
		c.AckEvery, c.AckInterval = 1, time.Second
		c.OnError = func(err error) {
			var pe *protocol.Error
			if errors.As(err, &pe) && pe.Code == protocol.CodeBeyondHead {
				refused.Add(1)
			}
		}
	})
	m1 := p.post("g1", "bob", "one")
	waitFor(t, "the ack of the first", func() bool { return slices.Contains(p.cursors("ack", "g1", "alice"), m1.MsgID) })
	syncs := len(p.requests(protocol.OpSync))
	prev := m1.MsgID
	p.pushRaw("alice", protocol.Message{Gid: "g1", MsgID: 1<<63 - 1, Prev: &prev, Sender: "bob", Body: "bogus"})
	waitFor(t, "the bogus message", func() bool { return rec.len() == 2 })
	waitFor(t, "the refused ack", func() bool { return refused.Load() == 1 })

	m3 := p.post("g1", "bob", "three")
	waitFor(t, "the ack of the third", func() bool { acked, _ := c.Cursor("g1"); return acked == m3.MsgID })
	if got, want := rec.bodies("g1"), []string{"one", "bogus", "three"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if _, contig := c.Cursor("g1"); contig != m3.MsgID {
		t.Fatalf("contiguous cursor %d, want %d", contig, m3.MsgID)
	}
	if n := len(p.requests(protocol.OpSync)) - syncs; n < 1 {
		t.Fatalf("%d syncs after the refusal, want one at least", n)
	}
	if st := c.Stats(); refused.Load() != 1 || st.Retakes != 1 || st.Reconnects != 0 {
		t.Fatalf("%d acks refused, %d retakes, %d reconnects; want 1, 1 and 0", refused.Load(), st.Retakes, st.Reconnects)
	}
}

// An ack the server refuses for good (the member was removed meanwhile) is
// reported once and not owed: the group could never be forgotten, and
// every Close reported the refusal again. Failures of a connection that
// ended hide no such refusal reported with them.
func TestAnAckRefusedForGoodIsReportedOnceAndNotOwed(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", func(cfg *Config) {
		cfg.AckEvery, cfg.AckInterval = 1000, time.Hour // acked only when flushed
	})
	p.post("g1", "bob", "hi")
	waitFor(t, "the push", func() bool { return rec.len() == 1 })
	p.set(func(p *peer) { delete(p.groups["g1"].members, "alice") }) // removed before the ack goes out
	if err := c.flush(context.Background()); err == nil || !strings.Contains(err.Error(), string(protocol.CodeNotMember)) {
		t.Fatalf("flush: %v, want the not_member refusal", err)
	}
	closeOwingNothing(t, c, "g1")

	refused := fmt.Errorf("client: ack g2 upto 5: %w", &protocol.Error{Code: protocol.CodeNotMember, Message: "not a member"})
	err := withoutDisconnects(errors.Join(fmt.Errorf("client: ack g1 upto 3: %w", ErrDisconnected), refused))
	if !errors.Is(err, refused) || errors.Is(err, ErrDisconnected) {
		t.Fatalf("an ack refused beside one lost to a disconnect: %v; want the refusal alone", err)
	}
	if err := withoutDisconnects(fmt.Errorf("client: flush: %w", ErrDisconnected)); err != nil {
		t.Fatalf("acks lost to a disconnect alone: %v, want nothing to report", err)
	}
}

// closeOwingNothing checks that c owes no ack of gid, whose ack the server
// refused for good, and that Close, with nothing owed, ends without error.
func closeOwingNothing(t *testing.T, c *Client, gid string) {
	t.Helper()
	c.mu.Lock()
	g := c.groups[gid]
	owed := g.acked < g.delivered
	c.mu.Unlock()
	if owed {
		t.Fatal("the ack refused for good is still owed")
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close after the refusal was reported: %v, want nil (nothing owed)", err)
	}
}
