package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// OnMessage may call Send and Open, which wait for a connection while the
// client is disconnected. Close, which waits for OnMessage, ends that wait
// with ErrClosed: it is what an app calls when it gives up on the server.
func TestCloseEndsASendOrOpenOfOnMessageWaitingForAConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(c *Client, m protocol.Message) error
	}{
		{"Send", func(c *Client, m protocol.Message) error {
			_, err := c.Send(context.Background(), m.Gid, "auto-reply")
			return err
		}},
		{"Open", func(c *Client, _ protocol.Message) error { return c.Open(context.Background(), "g2") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"alice", "bob"}})
			entered, release := make(chan struct{}), make(chan struct{})
			callErr := make(chan error, 1)
			var c *Client
			c, _ = dial(t, p, "alice", func(cfg *Config) {
				cfg.OnMessage = func(m protocol.Message) {
					close(entered)
					<-release
					callErr <- tc.call(c, m)
				}
			})
			p.post("g1", "bob", "reply to me")
			<-entered
			p.set(func(p *peer) { p.refuse = true }) // the server is gone
			p.kill()
			waitFor(t, "the disconnect", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.sess == nil })
			close(release)
			time.Sleep(50 * time.Millisecond) // the call waits for a connection

			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case <-closed:
			case <-time.After(3 * time.Second):
				p.set(func(p *peer) { p.refuse = false }) // let it end, for the leak check
				<-closed
				t.Fatalf("Close still blocked after 3 s: it waits for OnMessage, whose %s waits for a connection", tc.name)
			}
			if err := <-callErr; !errors.Is(err, ErrClosed) {
				t.Fatalf("%s from OnMessage during Close: %v, want ErrClosed", tc.name, err)
			}
		})
	}
}

// cuttingGateway answers auth and sync, then closes every connection 20 ms
// later with code and reason: a gateway that is shutting down, or one that
// cuts the client as too slow on every resync. It counts the connections.
func cuttingGateway(t *testing.T, code websocket.StatusCode, reason string) (url string, conns *atomic.Int64) {
	conns = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		conns.Add(1)
		ctx := context.Background()
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			req, err := protocol.Decode(b, 1<<16)
			if err != nil {
				return
			}
			switch req.Op {
			case protocol.OpAuth:
				_ = ws.Write(ctx, websocket.MessageText, protocol.Marshal(protocol.Authed{Op: protocol.OpAuthed, ID: req.ID, Uid: req.Token}))
			case protocol.OpSync:
				_ = ws.Write(ctx, websocket.MessageText, protocol.Marshal(protocol.Synced{Op: protocol.OpSynced, ID: req.ID, Groups: []protocol.GroupState{}}))
				time.Sleep(20 * time.Millisecond)
				_ = ws.Close(code, reason)
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws", conns
}

// A connection the server ends right after the sync does not restart the
// reconnect back-off: else every client of a gateway that keeps cutting
// them reconnects every MinBackoff for ever, all in step.
func TestReconnectsBackOffWhileTheServerEndsEveryConnectionAtOnce(t *testing.T) {
	url, conns := cuttingGateway(t, websocket.StatusGoingAway, "server shutting down")
	c, err := Dial(context.Background(), Config{
		URL:        url,
		Token:      func(context.Context) (string, error) { return "alice", nil },
		MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	n := conns.Load()
	_ = c.Close()
	// Backing off 5-10, 10-20, ... 250-500 ms: 8 to 14 connections in 2 s;
	// at MinBackoff each time, about 70.
	if n < 2 || n > 25 {
		t.Fatalf("%d connections in 2 s to a gateway that ends each one after its sync; want the reconnects backing off towards MaxBackoff (500 ms)", n)
	}
}

// After a reconnect the client pulls its opened groups. A pull refused with
// a code that says "try again" is pulled again after a back-off: else the
// messages missed while offline wait for the group's next message or the
// next reconnect.
// openedWithOne connects alice, who opened g1 and got bob's first message.
func openedWithOne(t *testing.T) (*peer, *Client, *recorder) {
	t.Helper()
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	if err := c.Open(context.Background(), "g1"); err != nil {
		t.Fatal(err)
	}
	p.post("g1", "bob", "one")
	waitFor(t, "the first message", func() bool { return rec.len() == 1 })
	return p, c, rec
}

func TestAResyncPullRefusedForAWhileIsPulledAgain(t *testing.T) {
	for _, code := range []protocol.Code{protocol.CodeUnavailable, protocol.CodeInternal, protocol.CodeRateLimited} {
		t.Run(string(code), func(t *testing.T) {
			p, c, rec := openedWithOne(t)

			p.set(func(p *peer) { p.refuse = true })
			p.kill()
			waitFor(t, "the disconnect", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.sess == nil })
			p.post("g1", "bob", "two, sent while alice was offline")
			p.set(func(p *peer) { p.refuse, p.refusePulls, p.pullRefusal = false, 2, code })
			waitFor(t, "the reconnect", func() bool { return c.Stats().Reconnects == 1 })
			waitFor(t, "the message sent while offline", func() bool { return rec.len() == 2 })
			if n := len(p.requests(protocol.OpPull)); n < 4 {
				t.Fatalf("%d pulls, want 4 or more: Open's, the resync's (refused), the next one (refused), and the one that got the message", n)
			}
			rec.check(t)
		})
	}
}

// Close is the app's own doing: OnError hears nothing of the connection it
// closes, least of all that the server closed it. (Close and the run loop
// race, hence the rounds.)
func TestCloseReportsNoDisconnect(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	for range 20 {
		var mu sync.Mutex
		var errs []error
		c, _ := dial(t, p, "alice", func(c *Config) {
			c.OnError = func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
		})
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(errs) > 0 {
			t.Fatalf("OnError during a clean Close: %v", errs)
		}
		mu.Unlock()
	}
}

// A connection that goes silent (the peer gone without a FIN: no answers,
// no pongs) while the client resyncs after a reconnect is dropped within
// the keepalive's bound, a ping interval and a request timeout, not after
// one pull timeout per group to resync; then the client reconnects and
// gets what was sent meanwhile.
func TestASilentConnectionDuringTheResyncIsDroppedByTheKeepalive(t *testing.T) {
	const groups = 8
	members := map[string][]string{}
	for i := range groups {
		members[fmt.Sprintf("g%d", i)] = []string{"alice", "bob"}
	}
	p := newPeer(t, members)
	c, rec := dial(t, p, "alice", func(c *Config) {
		c.RequestTimeout = time.Second
		c.PingInterval = 100 * time.Millisecond
	})
	for gid := range members {
		if err := c.Open(context.Background(), gid); err != nil {
			t.Fatal(err)
		}
	}
	p.set(func(p *peer) { p.silentAfter = 1 })
	p.kill()
	waitFor(t, "the silent connection's sync", func() bool { return len(p.requests(protocol.OpSync)) == 2 })
	silent := time.Now()
	p.post("g3", "bob", "sent while the connection was silent")

	// The resync's pulls alone would hold the silent connection for
	// groups x RequestTimeout (8 s); the keepalive drops it in about 1.1 s.
	bound := 4 * time.Second
	for len(p.requests(protocol.OpSync)) < 3 {
		if time.Since(silent) > bound {
			t.Fatalf("the silent connection still held after %v (keepalive: ping every 100ms, 1s to answer); %d pulls sent on it",
				bound, len(p.requests(protocol.OpPull)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("silent connection dropped after %v", time.Since(silent).Round(time.Millisecond))
	waitFor(t, "the message sent while silent", func() bool { return rec.len() == 1 })
	rec.check(t)
}

// An answer the client refuses to decode (here a sync answer of more
// groups than a frame of real ones holds) fails its request at once, with
// the reason: not after RequestTimeout, as a timeout that says nothing of
// the cause.
func TestAnAnswerRefusedAtDecodeFailsItsRequestWithTheReason(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice"}})
	p.set(func(p *peer) { p.syncGroups = "[" + strings.Repeat(`{"gid":"x"},`, maxGroups) + `{"gid":"x"}]` })
	start := time.Now()
	_, err := Dial(context.Background(), Config{URL: p.url, RequestTimeout: 30 * time.Second,
		Token: func(context.Context) (string, error) { return "alice", nil }})
	if took := time.Since(start); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "groups") || took > 15*time.Second {
		t.Fatalf("Dial on a sync answer of %d groups: %v after %v; want it refused at once, naming the groups", maxGroups+1, err, took.Round(time.Millisecond))
	}
}

// A gateway sets no bound on a user's groups and sends a sync answer
// whatever its size: the client takes every group a frame it reads can
// hold. It refused more than 100,000, so a user of more groups could not
// connect at all.
func TestASyncOfEveryGroupAFrameHoldsIsTaken(t *testing.T) {
	const n = 150_000
	p := newPeer(t, map[string][]string{"g1": {"alice"}})
	p.set(func(p *peer) {
		p.extraGroups = func(string) []protocol.GroupState {
			gs := make([]protocol.GroupState, n)
			for i := range gs {
				gs[i] = protocol.GroupState{Gid: fmt.Sprintf("x%d", i), Head: -1, Ack: -1, Read: -1, UnreadExact: true}
			}
			return gs
		}
	})
	c, _ := dial(t, p, "alice", nil)
	if got := len(c.Groups()); got != n+1 {
		t.Fatalf("%d groups after the sync, want %d", got, n+1)
	}
	if b := protocol.Marshal(protocol.GroupState{Gid: "a", UnreadExact: true}); string(b) != shortestGroup {
		t.Fatalf("the shortest group a gateway writes is %s, not %s: maxGroups is out of date", b, shortestGroup)
	}
}

// A frame without an id that the client refuses to decode (a push of more
// messages than a page holds, a receipts push of more counts than a server
// sends, a frame that is not JSON) is a server fault the application hears
// of: it goes to OnError as ErrProtocol, and the connection goes on. Such
// frames were only logged.
func TestAFrameWithoutAnIDRefusedAtDecodeGoesToOnError(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	errs := make(chan error, 16)
	c, rec := dial(t, p, "alice", func(c *Config) {
		c.OnError = func(err error) {
			if errors.Is(err, ErrProtocol) {
				errs <- err
			}
		}
	})
	list := func(n int, el string) string { return "[" + strings.Repeat(el+",", n-1) + el + "]" }
	for _, f := range []struct{ what, frame string }{
		{"messages", `{"op":"push","msgs":` + list(protocol.MaxLimit+1, `{"gid":"g1","msgid":1}`) + `}`},
		{"read counts", `{"op":"receipts","gid":"g1","counts":` + list(maxCounts+1, `{"msgid":1,"read":0,"audience":1}`) + `}`},
		{"invalid character", `{"op":"push","msgs":[{"gid":"g1",]}`},
	} {
		for _, pc := range p.connsOf("alice") {
			p.write(pc, []byte(f.frame))
		}
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), f.what) {
				t.Errorf("OnError: %v; want it to name %s", err, f.what)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no ErrProtocol in OnError for a frame of %s", f.what)
		}
	}
	p.post("g1", "bob", "one")
	waitFor(t, "a message after the refused frames", func() bool { return rec.len() == 1 })
	if st := c.Stats(); st.Reconnects != 0 || st.Pushes != 1 {
		t.Fatalf("%+v; want one push, on the same connection", st)
	}
}

// A resync frame makes the client sync again on the same connection, and
// pull what the heads show it missed; a sync refused as unavailable (the
// server rebuilding its memberships) is tried again. Frames that come while
// one resync runs add one more, not one each.
func TestAResyncFrameSyncsAndPullsWhatWasMissed(t *testing.T) {
	p, c, rec := openedWithOne(t)

	p.set(func(p *peer) { p.dropPush = func(protocol.Message) bool { return true } })
	p.post("g1", "bob", "two, whose push is lost")
	p.set(func(p *peer) { p.dropPush, p.refuseSyncs = nil, 2 })
	syncs := len(p.requests(protocol.OpSync))
	for range 5 {
		p.resync("alice")
	}
	waitFor(t, "the lost message", func() bool { return rec.len() == 2 })
	rec.check(t)
	waitFor(t, "the resyncs to end", func() bool {
		c.mu.Lock()
		s := c.sess
		c.mu.Unlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.resyncing
	})
	if st := c.Stats(); st.Reconnects != 0 || st.Resyncs < 1 || st.Resyncs > 2 {
		t.Fatalf("%+v; want 1 or 2 resyncs (5 frames, coalesced) on the same connection", st)
	}
	if n := len(p.requests(protocol.OpSync)) - syncs; n < 3 || n > 4 {
		t.Fatalf("%d syncs after the resync frames, want 3 or 4: two refused, then one for each resync", n)
	}
}
