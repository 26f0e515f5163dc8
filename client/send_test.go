package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

func TestResendAfterTimeoutSameCmid(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.swallowSends = 1 }) // stored and pushed, answer lost
	c, rec := dial(t, p, "alice", func(c *Config) { c.SendTimeout = 100 * time.Millisecond })
	id, err := c.Send(context.Background(), "g1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	sends := p.requests(protocol.OpSend)
	if len(sends) < 2 || sends[0].Cmid != sends[len(sends)-1].Cmid {
		t.Fatalf("send frames %+v: want a resend with the same cmid", sends)
	}
	if msgs := p.msgs("g1"); len(msgs) != 1 || msgs[0].MsgID != id {
		t.Fatalf("log %+v: want one message, msgid %d", msgs, id)
	}
	waitFor(t, "own message", func() bool { return rec.len() == 1 })
	// Pushes come in log order: a second copy of "hello" would be
	// delivered before a later message on the same connection.
	if got := rec.bodiesAfter(t, p, "g1", "later"); !slices.Equal(got, []string{"hello", "later"}) || c.Stats().Resends < 1 {
		t.Fatalf("delivered %q, stats %+v: want [hello later] and a resend", got, c.Stats())
	}
}

func TestResendAfterReconnect(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.swallowSends = 1 })
	c, rec := dial(t, p, "alice", func(c *Config) { c.SendTimeout = time.Hour })
	go func() {
		waitFor(t, "the send", func() bool { return len(p.requests(protocol.OpSend)) == 1 })
		p.kill()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, err := c.SendWithID(ctx, "g1", "my-cmid-1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if msgs := p.msgs("g1"); len(msgs) != 1 || msgs[0].MsgID != id {
		t.Fatalf("log %+v: want one message, msgid %d", msgs, id)
	}
	waitFor(t, "own message", func() bool { return rec.len() == 1 })
	if st := c.Stats(); st.Reconnects != 1 || st.Resends != 1 {
		t.Fatalf("stats %+v: want 1 reconnect, 1 resend", st)
	}
}

// Sends that time out are resent after a growing back-off, not at once: an
// overloaded server must not be handed every send again the moment it is
// late.
func TestResendsAfterTimeoutsBackOff(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.swallowSends = 1 << 30 }) // no answer, ever
	c, _ := dial(t, p, "alice", func(c *Config) {
		c.SendTimeout = 10 * time.Millisecond
		c.MinBackoff, c.MaxBackoff = 40*time.Millisecond, 160*time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.Send(ctx, "g1", "hello"); err == nil {
		t.Fatal("a send that is never answered succeeded")
	}
	// At once, a send every 10 ms: ~100 in the second. Backing off 20-40,
	// 40-80, 80-160 ms and then 80-160 ms each: at most ~14.
	n := len(p.requests(protocol.OpSend))
	if n < 4 || n > 20 {
		t.Fatalf("%d send frames in a second of timeouts: want a few, backing off", n)
	}
}

// A send the server refuses as overloaded waits out a pause, which grows
// while the refusals go on, and is then resent: it succeeds once the server
// takes it, and the group gets one message.
func TestOverloadedSendPausesAndIsResent(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.overloadSends = 2 })
	c, _ := dial(t, p, "alice", func(c *Config) { c.MinBackoff, c.MaxBackoff = 20*time.Millisecond, time.Second })
	start := time.Now()
	id, err := c.Send(context.Background(), "g1", "hello")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Overloaded != 2 {
		t.Fatalf("%d refused as overloaded, want 2", st.Overloaded)
	}
	if msgs := p.msgs("g1"); len(msgs) != 1 || msgs[0].MsgID != id {
		t.Fatalf("log %+v: want one message, msgid %d", msgs, id)
	}
	// Pauses of 5 back-offs, jittered to half at least: 50 ms, then 100 ms.
	if took < 150*time.Millisecond {
		t.Fatalf("accepted %v after the first try: the refused sends did not wait", took)
	}
}

// pauseLog is a slog handler that keeps the pauses the client logs as it
// pauses its sends after an overloaded refusal.
type pauseLog struct {
	mu     sync.Mutex
	pauses []time.Duration
}

func (l *pauseLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *pauseLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *pauseLog) WithGroup(string) slog.Handler            { return l }

func (l *pauseLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "pause" {
			l.mu.Lock()
			l.pauses = append(l.pauses, a.Value.Duration())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// With the default back-off, an overloaded refusal pauses the client's
// sends for 0.25-0.5 s, and a refusal of the resend for 0.5-1 s, as
// client/doc.go, PROTOCOL.md and docs/operations.md say.
func TestOverloadedPausesWithTheDefaultsAreAQuarterToHalfASecondThenDouble(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.overloadSends = 2 })
	log := &pauseLog{}
	c, _ := dial(t, p, "alice", func(c *Config) { c.MinBackoff, c.MaxBackoff, c.Logger = 0, 0, slog.New(log) })
	start := time.Now()
	if _, err := c.Send(context.Background(), "g1", "hello"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.pauses) != 2 {
		t.Fatalf("pauses %v, want 2", log.pauses)
	}
	first, second := log.pauses[0], log.pauses[1]
	if first < 250*time.Millisecond || first > 500*time.Millisecond || second < 500*time.Millisecond || second > time.Second {
		t.Fatalf("pauses %v, %v after two overloaded refusals; want 0.25-0.5 s, then 0.5-1 s", first, second)
	}
	if took < first+second {
		t.Fatalf("accepted %v after the first try, within the pauses (%v, %v)", took, first, second)
	}
}

// A client keeps at most MaxSending sends in flight; the others wait in the
// client, where their ctx can still end them.
func TestSendsInFlightAreBounded(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.swallowSends = 100 }) // no answers: every send stays in flight
	c, _ := dial(t, p, "alice", func(c *Config) { c.MaxSending, c.SendTimeout = 2, time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			_, err := c.Send(ctx, "g1", "hello")
			errs <- err
		}()
	}
	waitFor(t, "two sends", func() bool { return len(p.requests(protocol.OpSend)) == 2 })
	time.Sleep(100 * time.Millisecond)
	if n := len(p.requests(protocol.OpSend)); n != 2 {
		t.Fatalf("%d sends reached the server, want MaxSending (2)", n)
	}
	cancel()
	for range 5 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("Send after its ctx ended: %v, want context.Canceled", err)
		}
	}
	// Every Send has returned, so wrote whatever it was to write. The peer
	// reads its connection in order and answers a ping only after the
	// frames before it: once the pong is back, each send frame is counted.
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	if err := s.conn.Ping(pctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if n := len(p.requests(protocol.OpSend)); n != 2 {
		t.Fatalf("%d sends reached the server after the ctx ended, want 2", n)
	}
}

// Close ends the wait of a Send from OnMessage for an overload pause to end
// with ErrClosed: Close waits for OnMessage, and the pause may be long.
func TestCloseEndsASendOfOnMessageWaitingOutAnOverloadPause(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.overloadSends = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	replied := make(chan error, 1)
	var c *Client
	c, _ = dial(t, p, "alice", func(cfg *Config) {
		cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour // a pause of half an hour at least
		cfg.OnMessage = func(m protocol.Message) {
			if m.Body == "reply to me" {
				_, err := c.Send(ctx, m.Gid, "auto-reply")
				replied <- err
			}
		}
	})
	refused := make(chan error, 1)
	go func() { _, err := c.Send(ctx, "g1", "refused"); refused <- err }()
	waitFor(t, "the refusal", func() bool { return c.Stats().Overloaded == 1 })
	p.post("g1", "bob", "reply to me")
	time.Sleep(50 * time.Millisecond) // the reply waits out the pause

	closeWithin3s(t, c, cancel, "it waits for OnMessage, whose Send waits out the overload pause")
	for _, ch := range []chan error{replied, refused} {
		if err := <-ch; !errors.Is(err, ErrClosed) {
			t.Fatalf("Send waiting out a pause during Close: %v, want ErrClosed", err)
		}
	}
}

// A gateway refuses the 32 sends a client has in flight at once, in one
// burst: one refusal of the server's, answered 32 times. The client pauses
// once (0.05-0.1 s here), as for one refusal, not 32 times longer each time
// up to MaxBackoff (5 s). So it does for sends over the user's rate
// (rate_limited), which each backed off on its own, in its place among the
// sends in flight, the others going on at the same rate to be refused.
func TestOneBurstOfOverloadedRefusalsPausesOnce(t *testing.T) {
	for _, code := range []protocol.Code{protocol.CodeOverloaded, protocol.CodeRateLimited} {
		t.Run(string(code), func(t *testing.T) { oneBurstPausesOnce(t, code) })
	}
}

func oneBurstPausesOnce(t *testing.T, code protocol.Code) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, _ := dial(t, p, "alice", func(c *Config) { c.MinBackoff, c.MaxBackoff, c.OnError = 20*time.Millisecond, 5*time.Second, nil })
	p.set(func(p *peer) { p.refuseSends, p.sendRefusal = 32, code })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	// The peer answers none until all 32 are in flight: every refusal is
	// of a send made before the first refusal, however the goroutines run.
	p.pushMu.Lock()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Send(ctx, "g1", "hello"); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, "32 sends in flight", func() bool {
		c.sending.mu.Lock()
		defer c.sending.mu.Unlock()
		return c.sending.used == 32
	})
	p.pushMu.Unlock()
	wg.Wait()
	// A pause doubled per refused send: 2.5-5 s before the resends.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("32 sends refused once each in one burst, all accepted after %v; want one pause of 0.05-0.1 s", took.Round(time.Millisecond))
	}
	if st := c.Stats(); st.Overloaded+st.RateLimited != 32 {
		t.Fatalf("%d sends refused as overloaded and %d as rate_limited, want 32 as %s", st.Overloaded, st.RateLimited, code)
	}
	if c.sending.size >= 32 {
		t.Fatalf("%d sends in flight at most after a burst refused as %s; want the number halved", int(c.sending.size), code)
	}
}

// A Send whose ctx ends while the server keeps refusing it as overloaded
// says so, and that it can be resent with the same cmid: not only that it
// waited for a place among the sends in flight.
func TestASendEndedDuringAnOverloadPauseSaysTheServerRefusedIt(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.overloadSends = 1 << 30 })
	c, _ := dial(t, p, "alice", func(c *Config) { c.MinBackoff, c.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.SendWithID(ctx, "g1", "c-42", "hello")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send refused for ever: %v, want context.DeadlineExceeded", err)
	}
	t.Logf("Send: %v", err)
	for _, want := range []string{"c-42", "refused by the server as overloaded", "same cmid"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Send: %v\nwant it to say %q", err, want)
		}
	}
	if se := (*SendError)(nil); !errors.As(err, &se) || se.Cmid != "c-42" {
		t.Fatalf("Send: %#v, want a *SendError of c-42", se)
	}
}

// A send the server refused before storing anything (overloaded,
// rate_limited, a refusal for good) is not taken for one that may have
// been stored; one whose answer was lost, or that the server failed midway
// (unavailable, internal: a write to the log cut short may still land), is.
func TestASendMayBeStoredOnlyWhenItsAnswerWasLostOrTheServerFailedMidway(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&protocol.Error{Code: protocol.CodeOverloaded}, false},
		{&protocol.Error{Code: protocol.CodeRateLimited}, false},
		{&protocol.Error{Code: protocol.CodeNotMember}, false},
		{&protocol.Error{Code: protocol.CodeUnauthenticated}, false},
		{&protocol.Error{Code: protocol.CodeUnavailable}, true},
		{&protocol.Error{Code: protocol.CodeInternal}, true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("%w: read: EOF", ErrDisconnected), true},
	} {
		if got := mayBeStored(tc.err); got != tc.want {
			t.Errorf("mayBeStored(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A Send whose answer is lost (the message is stored) and whose ctx then
// ends says that the message may have been stored and how to resend it
// without a second one: with SendWithID and the send's cmid, which it
// gives. It said only that ctx ended, and an application that retried
// with Send posted the message twice.
func TestASendWhoseAnswerIsLostSaysItMayBeStoredAndHowToResendIt(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.swallowSends = 1 << 30 })
	c, _ := dial(t, p, "alice", func(c *Config) { c.SendTimeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Send(ctx, "g1", "hello")
	t.Logf("Send: %v", err)
	waitFor(t, "the message stored", func() bool { return len(p.msgs("g1")) == 1 })
	stored := p.msgs("g1")
	for _, want := range []string{"may have been stored", fmt.Sprintf("SendWithID(ctx, %q, %q, body)", "g1", stored[0].Cmid), "Send would post it again"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Send: %v\nwant it to say %q", err, want)
		}
	}
	var se *SendError
	if !errors.As(err, &se) || !se.MaybeStored || se.Gid != "g1" || se.Cmid != stored[0].Cmid || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send: %#v, want a *SendError of g1 and cmid %s that may be stored, wrapping ctx's error", se, stored[0].Cmid)
	}
	p.set(func(p *peer) { p.swallowSends = 0 })
	id, err := c.SendWithID(context.Background(), se.Gid, se.Cmid, "hello")
	if err != nil || id != stored[0].MsgID {
		t.Fatalf("SendWithID again: %d, %v; want the stored message's msgid %d", id, err, stored[0].MsgID)
	}
	if n := len(p.msgs("g1")); n != 1 {
		t.Fatalf("%d messages after the resend, want 1", n)
	}
}

// A send whose frame is over the server's read limit makes the server close
// the connection (1009). It is refused for good, as a body over the limit
// the server reads is: resent on every new connection, it would end each
// of them, for every group of the client, until the Send's ctx ends. A
// frame the server stops reading midway is refused the same way.
func TestASendOverTheServersFrameLimitIsRefusedNotResent(t *testing.T) {
	for _, size := range []int{200 << 10, 20 << 20} {
		t.Run(fmt.Sprint(size>>10, "KiB"), func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}}) // reads frames of up to 32 KiB
			c, _ := dial(t, p, "alice", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := c.Send(ctx, "g1", strings.Repeat("x", size))
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeBodyTooLarge {
				t.Fatalf("Send: %v (after %d reconnects), want %s", err, c.Stats().Reconnects, protocol.CodeBodyTooLarge)
			}
			if st := c.Stats(); st.Reconnects > 1 || st.Resends > 0 {
				t.Fatalf("stats %+v: want the one reconnect after the server closed the connection, and no resend", st)
			}
			if _, err := c.Send(context.Background(), "g1", "small"); err != nil {
				t.Fatalf("a send after the refusal: %v", err)
			}
		})
	}
}

// A server that says its body limit (max_body in authed) is not sent a
// longer body: the send is refused at once, as the server would, and the
// connection, which the frame might have closed (1009) with every send in
// flight on it, goes on. A body of the limit is sent.
func TestABodyOverTheLimitTheServerSaysIsRefusedWithoutSendingIt(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	p.set(func(p *peer) { p.maxBody = 1000 })
	c, _ := dial(t, p, "alice", nil)
	for _, size := range []int{1001, 20 << 20} {
		_, err := c.Send(context.Background(), "g1", strings.Repeat("x", size))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeBodyTooLarge || !strings.Contains(err.Error(), "at most 1000") {
			t.Fatalf("a body of %d bytes: %v, want %s naming the limit", size, err, protocol.CodeBodyTooLarge)
		}
	}
	if n := len(p.requests(protocol.OpSend)); n != 0 {
		t.Fatalf("%d sends reached the server", n)
	}
	if _, err := c.Send(context.Background(), "g1", strings.Repeat("<", 1000)); err != nil {
		t.Fatalf("a body of the limit: %v", err)
	}
	if st := c.Stats(); st.Reconnects != 0 || st.Resends != 0 {
		t.Fatalf("stats %+v: want no reconnect, no resend", st)
	}
}

// Close ends the back-off of a Send from OnMessage between two attempts
// (after a timeout, or a refusal that may pass) with ErrClosed, as it ends
// an overload pause: the back-off grows to MaxBackoff, and Close waits for
// OnMessage.
func TestCloseEndsASendOfOnMessageBackingOffBeforeAResend(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(p *peer)
	}{
		{"timeout", func(p *peer) { p.swallowSends = 1 << 30 }},
		{"unavailable", func(p *peer) { p.refuseSends, p.sendRefusal = 1<<30, protocol.CodeUnavailable }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			replied := make(chan error, 1)
			var c *Client
			c, _ = dial(t, p, "alice", func(cfg *Config) {
				cfg.SendTimeout = 100 * time.Millisecond
				cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour // a back-off of half an hour at least
				cfg.OnMessage = func(m protocol.Message) {
					if m.Body == "reply to me" {
						_, err := c.Send(ctx, m.Gid, "auto-reply")
						replied <- err
					}
				}
			})
			p.set(tc.set) // before the post: the auto-reply may be sent at once
			p.post("g1", "bob", "reply to me")
			waitFor(t, "the send", func() bool { return len(p.requests(protocol.OpSend)) == 1 })
			time.Sleep(300 * time.Millisecond) // past SendTimeout: the send backs off

			closeWithin3s(t, c, cancel, "it waits for OnMessage, whose Send backs off before a resend")
			if err := <-replied; !errors.Is(err, ErrClosed) {
				t.Fatalf("Send backing off during Close: %v, want ErrClosed", err)
			}
		})
	}
}
