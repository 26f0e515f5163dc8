package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// errLog collects OnError calls.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) on(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// dialConfig is alice's config for p with fast test timings.
func dialConfig(p *peer, token string, errs *errLog) Config {
	return Config{
		URL:        p.url,
		Token:      func(context.Context) (string, error) { return token, nil },
		MinBackoff: 5 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond,
		OnError:    errs.on,
	}
}

// A server that asks the first connection to be made again (closing it
// with 1013, 1012 or 1001, or refusing its upgrade or sync as unavailable)
// and serves the next gives Dial a working Client: the application is not
// left to retry what the server said to retry. What was retried goes to
// OnError.
func TestDialTriesAgainWhenTheServerAsksTo(t *testing.T) {
	for _, tc := range []struct {
		name string
		ask  func(p *peer)
		want func(err error) bool
	}{
		{"1013 during sync", func(p *peer) { p.closeSyncs, p.closeCode = 1, websocket.StatusTryAgainLater },
			func(err error) bool { return websocket.CloseStatus(err) == websocket.StatusTryAgainLater }},
		{"1012 during sync", func(p *peer) { p.closeSyncs, p.closeCode = 1, websocket.StatusServiceRestart },
			func(err error) bool { return websocket.CloseStatus(err) == websocket.StatusServiceRestart }},
		{"1001 during sync", func(p *peer) { p.closeSyncs, p.closeCode = 1, websocket.StatusGoingAway },
			func(err error) bool { return websocket.CloseStatus(err) == websocket.StatusGoingAway }},
		{"sync unavailable", func(p *peer) { p.refuseSyncs = 1 }, isCode(protocol.CodeUnavailable)},
		{"upgrade unavailable", func(p *peer) { p.refuseUpgrades = 1 }, isCode(protocol.CodeUnavailable)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice"}})
			p.set(tc.ask)
			errs := &errLog{}
			rec := &recorder{}
			cfg := dialConfig(p, "alice", errs)
			cfg.OnMessage = rec.on
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := Dial(ctx, cfg)
			if err != nil {
				t.Fatalf("Dial: %v; want a Client from the second connection", err)
			}
			defer c.Close()
			if got := errs.all(); len(got) != 1 || !tc.want(got[0]) {
				t.Fatalf("OnError got %v, want the one error the server asked to retry", got)
			}
			if gs := c.Groups(); len(gs) != 1 || gs[0].Gid != "g1" {
				t.Fatalf("groups %+v, want g1's", gs)
			}
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			if _, err := c.Send(sctx, "g1", "hi"); err != nil {
				t.Fatalf("Send: %v", err)
			}
			waitFor(t, "the message sent", func() bool { return rec.len() == 1 })
		})
	}
}

// A gateway that cannot register a connection closes it with 1013 right
// after its authed answer, as the client writes its sync: the close may
// end that write, or come as the client waits for the answer. Either way
// Dial tries again. Which of the two happens is a race, so it is run
// often enough for both.
func TestDialTriesAgainWhenClosedRightAfterAuthed(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice"}})
	for i := range 100 {
		p.set(func(p *peer) { p.closeAuths, p.closeCode = 1, websocket.StatusTryAgainLater })
		errs := &errLog{}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := Dial(ctx, dialConfig(p, "alice", errs))
		cancel()
		if err != nil {
			t.Fatalf("Dial %d: %v; want a Client from the second connection", i, err)
		}
		c.Close()
		if got := errs.all(); len(got) != 1 || websocket.CloseStatus(got[0]) != websocket.StatusTryAgainLater {
			t.Fatalf("Dial %d: OnError got %v, want the 1013 close", i, got)
		}
	}
}

func isCode(code protocol.Code) func(error) bool {
	return func(err error) bool {
		var pe *protocol.Error
		return errors.As(err, &pe) && pe.Code == code
	}
}

// Dial fails at once, whatever its ctx, on every failure the server did
// not ask to retry: a bad token, a server that refuses the connection, a
// 503 that is not a gateway's "unavailable".
func TestDialFailsAtOnceWhenNotAskedToRetry(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(p *peer)
		tok  string
		want func(err error) bool
	}{
		{"bad token", nil, "bad", isCode(protocol.CodeBadToken)},
		{"server gone", func(p *peer) { p.close() }, "alice",
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "client: dial") }},
		{"503 of no gateway", func(p *peer) { p.set(func(p *peer) { p.refuse = true }) }, "alice",
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "503") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice"}})
			if tc.make != nil {
				tc.make(p)
			}
			errs := &errLog{}
			done := make(chan error, 1)
			go func() {
				c, err := Dial(context.Background(), dialConfig(p, tc.tok, errs)) // no deadline
				if c != nil {
					c.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(3 * time.Second):
				t.Fatal("Dial still trying after 3 s, on a failure the server did not ask to retry")
			}
			if !tc.want(err) {
				t.Fatalf("Dial: %v", err)
			}
			if got := errs.all(); len(got) != 0 {
				t.Fatalf("OnError got %v, want nothing: Dial made one attempt", got)
			}
			if n := len(p.requests(protocol.OpAuth)); n > 1 {
				t.Fatalf("%d auth frames, want at most 1", n)
			}
		})
	}
}

// A server that keeps asking to try again has Dial try until its ctx
// ends, and the error says both: what the server asked, and that ctx ended.
func TestDialGivesUpWhenCtxEndsWhileTheServerAsksToTryAgain(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice"}})
	p.set(func(p *peer) { p.closeSyncs, p.closeCode = 1<<30, websocket.StatusTryAgainLater })
	errs := &errLog{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := Dial(ctx, dialConfig(p, "alice", errs))
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded on a server that closes every connection with 1013")
	}
	if !errors.Is(err, context.DeadlineExceeded) || websocket.CloseStatus(err) != websocket.StatusTryAgainLater ||
		!strings.Contains(err.Error(), "asked to try again") {
		t.Fatalf("Dial: %v; want the server's 1013 and ctx's end, both", err)
	}
	if n := len(p.requests(protocol.OpAuth)); n < 2 {
		t.Fatalf("%d connections in 2 s, want Dial to have tried again", n)
	}
	if got := errs.all(); len(got) == 0 || websocket.CloseStatus(got[0]) != websocket.StatusTryAgainLater {
		t.Fatalf("OnError got %v, want the 1013 closes", got)
	}
}

// A gateway behind TLS with a private CA (wss://) is reached through the
// HTTPClient whose transport trusts that CA; without it the dial fails on
// the certificate, at once.
func TestAClientReachesAGatewayOverTLSWithItsCA(t *testing.T) {
	p := newPeer(t, map[string][]string{"g": {"alice", "bob"}})
	p.srv.Close()
	p.srv = httptest.NewTLSServer(http.HandlerFunc(p.serveHTTP))
	p.url = "wss" + strings.TrimPrefix(p.srv.URL, "https") + "/v1/ws"

	_, rec := dial(t, p, "alice", func(c *Config) { c.HTTPClient = p.srv.Client() })
	if got := rec.bodiesAfter(t, p, "g", "sealed"); !slices.Equal(got, []string{"sealed"}) {
		t.Fatalf("alice over wss got %q, want [sealed]", got)
	}
	_, err := Dial(context.Background(), Config{URL: p.url, Token: func(context.Context) (string, error) { return "bob", nil }})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a dial trusting the system's CAs only: %v, want a certificate error", err)
	}
}
