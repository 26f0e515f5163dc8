package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// stalledHijack holds the WebSocket upgrade of a request in Hijack until
// release is closed, after telling hijacking.
type stalledHijack struct {
	http.ResponseWriter
	hijacking chan<- struct{}
	release   <-chan struct{}
}

func (s stalledHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	close(s.hijacking)
	<-s.release
	return s.ResponseWriter.(http.Hijacker).Hijack()
}

// A connection whose upgrade began before Shutdown (it passed the check
// for a gateway shutting down) and ends after it is one of the connections
// Shutdown closes and waits for: Shutdown does not return before it, and
// it ends with "going away".
func TestShutdownWaitsForAConnectionUpgradedAsItBegins(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1})
	g := e.gws[0].g
	hijacking, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.Handler().ServeHTTP(stalledHijack{w, hijacking, release}, r)
	}))
	defer srv.Close()

	type dial struct {
		ws  *websocket.Conn
		err error
	}
	dialed := make(chan dial, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws?token="+e.token("alice"), nil)
		dialed <- dial{ws, err}
	}()
	<-hijacking
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- g.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		close(release)
		t.Fatalf("Shutdown returned (%v) while a connection that began before it was still being upgraded", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	d := <-dialed
	if d.err != nil {
		t.Fatalf("dial: %v", d.err)
	}
	ws := d.ws
	defer ws.CloseNow()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, b, err := ws.Read(ctx)
		cancel()
		if err == nil {
			if !strings.Contains(string(b), `"op":"`+protocol.OpAuthed+`"`) {
				t.Fatalf("frame %s before the close, want authed", b)
			}
			continue
		}
		if s := websocket.CloseStatus(err); s != websocket.StatusGoingAway {
			t.Fatalf("the connection ended with %v (%d), want 1001 going away", err, s)
		}
		break
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown still waiting 10 s after its last connection ended")
	}
}

// A connection upgraded as Shutdown begins that has yet to send its auth
// frame is closed with "going away" at once, not left to wait for the frame
// (and Shutdown with it) until AuthTimeout closes it as unauthenticated.
func TestShutdownClosesAConnectionUpgradedAsItBeginsBeforeItsAuthFrame(t *testing.T) {
	const authTimeout = 8 * time.Second
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.AuthTimeout = authTimeout }})
	g := e.gws[0].g
	hijacking, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.Handler().ServeHTTP(stalledHijack{w, hijacking, release}, r)
	}))
	defer srv.Close()

	dialed := make(chan *websocket.Conn, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws", nil)
		if err != nil {
			t.Errorf("dial: %v", err)
		}
		dialed <- ws
	}()
	<-hijacking
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- g.Shutdown(ctx)
	}()
	time.Sleep(100 * time.Millisecond) // Shutdown has closed what it knows of
	close(release)
	ws := <-dialed
	if ws == nil {
		t.FailNow()
	}
	defer ws.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 2*authTimeout)
	defer cancel()
	_, b, err := ws.Read(ctx)
	if s := websocket.CloseStatus(err); s != websocket.StatusGoingAway {
		t.Fatalf("the connection ended with %q, %v (%d) after %v; want 1001 going away", b, err, s, time.Since(start).Round(time.Millisecond))
	}
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// Shutdown closed every connection in one loop, and their clients all
// reconnected to the other gateways at once, whatever their back-off.
// It closes them in a stream, at most DrainRate a second (here 10: ten
// connections over a second), and within half the time its context
// leaves (a shutdown of 400 ms drains them in 200 ms, and returns in
// time).
func TestShutdownDrainsConnectionsInAStream(t *testing.T) {
	for _, c := range []struct {
		name    string
		timeout time.Duration
		least   time.Duration // the spread of the closes at least
	}{
		{"at the drain rate", 20 * time.Second, 500 * time.Millisecond},
		{"within half the shutdown timeout", 400 * time.Millisecond, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{gateways: 1, tune: func(cfg *Config) { cfg.DrainRate = 10 }})
			const n = 10
			closed := make(chan time.Time, n)
			for i := range n {
				r := e.login(0, fmt.Sprintf("u%d", i))
				// Answered once the connection is served: a connection
				// still writing its presence when Shutdown begins is
				// closed at once as it ends (see runConn).
				r.send(map[string]any{"op": "sync", "id": "s"})
				if f := r.answer(); f["op"] != "synced" {
					t.Fatalf("sync: %v", f)
				}
				go func() {
					for {
						if _, _, err := r.ws.Read(context.Background()); err != nil {
							if websocket.CloseStatus(err) != websocket.StatusGoingAway {
								t.Errorf("connection ended with %v; want going away", err)
							}
							closed <- time.Now()
							return
						}
					}
				}()
			}
			g := e.gws[0].g
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			if err := g.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown within %v: %v; want the connections drained in half of it", c.timeout, err)
			}
			var first, last time.Time
			for i := range n {
				select {
				case at := <-closed:
					if i == 0 {
						first = at
					}
					last = at
				case <-time.After(10 * time.Second):
					t.Fatalf("%d of %d connections closed", i, n)
				}
			}
			if spread := last.Sub(first); spread < c.least {
				t.Fatalf("%d connections closed over %v; want %v at least", n, spread.Round(time.Millisecond), c.least)
			}
		})
	}
}
