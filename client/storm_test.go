package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// A gateway that goes away (a graceful drain's 1001 to every connection
// at once, or a crash) ends all its clients' sessions together. With the
// back-off alone every client's first redial fell in [50 ms, 100 ms]
// after the close: the whole population came back to the other gateways
// in one wave. The first redial is spread over RedialSpread (2 s with the
// defaults).
func TestTheClientsOfAGatewayThatWentAwayComeBackSpreadOut(t *testing.T) {
	const n = 300
	uids := make([]string, n)
	for i := range uids {
		uids[i] = fmt.Sprintf("u%03d", i)
	}
	for _, tc := range []struct {
		name string
		end  func(p *peer)
	}{
		{"graceful 1001", func(p *peer) { p.cut(websocket.StatusGoingAway, "server shutting down; reconnect") }},
		{"crash", func(p *peer) { p.kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": uids})
			var mu sync.Mutex
			calls := map[string][]time.Time{}
			for _, u := range uids {
				cfg := Config{URL: p.url, Token: func(context.Context) (string, error) {
					mu.Lock()
					calls[u] = append(calls[u], time.Now())
					mu.Unlock()
					return u, nil
				}} // MinBackoff, MaxBackoff: the defaults
				c, err := Dial(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
			}
			time.Sleep(200 * time.Millisecond)
			cut := time.Now()
			tc.end(p)
			deadline := time.Now().Add(15 * time.Second)
			var redials []time.Duration
			for {
				mu.Lock()
				redials = redials[:0]
				for _, ts := range calls {
					if len(ts) >= 2 {
						redials = append(redials, ts[1].Sub(cut))
					}
				}
				mu.Unlock()
				if len(redials) == n || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			slices.Sort(redials)
			if len(redials) < n {
				t.Fatalf("only %d of %d clients redialled", len(redials), n)
			}
			spread := redials[n-1] - redials[0]
			t.Logf("%d clients: first redial after the close: min %v, p50 %v, max %v; spread %v",
				n, redials[0].Round(time.Millisecond), redials[n/2].Round(time.Millisecond), redials[n-1].Round(time.Millisecond), spread.Round(time.Millisecond))
			if spread < time.Second {
				t.Errorf("all %d clients redialled within %v of each other (%v..%v after the gateway went away): a synchronized wave; want the first redial spread over at least 1 s", n, spread.Round(time.Millisecond), redials[0].Round(time.Millisecond), redials[n-1].Round(time.Millisecond))
			}
		})
	}
}
