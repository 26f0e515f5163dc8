package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// A slow send while clients catch up halves their bound, not the sends':
// once per target, down to its floor; only then is the sends' bound
// halved. Without clients catching up, the sends' bound is halved at
// once, as before. Sends on time grow the catch-up bound back.
func TestSlowSendsHalveTheCatchUpBoundBeforeTheSends(t *testing.T) {
	const target = 50 * time.Millisecond
	c := newCatchUp(target, 64)
	a := newAdmission(target, 64)
	a.catchUp = c
	if !c.enter(context.Background()) {
		t.Fatal("a setup refused below the bound")
	}
	want := []int{32, 16, 8, 4}
	for i, w := range want {
		a.enter()
		a.leave(2 * target)
		a.enter()
		a.leave(2 * target) // the same slow moment: no second halving
		if got, sends := c.bound(), a.bound(); got != w || sends != 64 {
			t.Fatalf("after %d slow moments: catch-up bound %d, sends' %d; want %d and 64", i+1, got, sends, w)
		}
		c.cut = c.cut.Add(-target)
	}
	a.enter()
	a.leave(2 * target)
	if got, sends := c.bound(), a.bound(); got != minCatchingUp || sends != 32 {
		t.Fatalf("with the catch-up bound at its floor: %d, sends' %d; want %d and 32", got, sends, minCatchingUp)
	}
	for range 20 {
		a.enter()
		a.leave(time.Millisecond)
	}
	if got := c.bound(); got < 7 || got > 9 {
		t.Fatalf("catch-up bound %d after 20 sends on time from 4, want it grown by about 4 (one per bound's worth)", got)
	}
	// No client catching up: the sends' own load halves the sends' bound.
	c.leave()
	a.cut = time.Time{}
	before := a.bound()
	a.enter()
	a.leave(2 * target)
	if got := a.bound(); got != before/2 {
		t.Fatalf("sends' bound %d after a slow send with nobody catching up, want %d", got, before/2)
	}
	// The places: taken in turn; past the bound, a wait, then a refusal.
	c = newCatchUp(target, minCatchingUp)
	for range minCatchingUp {
		if !c.enter(context.Background()) {
			t.Fatal("refused below the bound")
		}
	}
	got := make(chan bool)
	go func() { got <- c.enter(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	c.leave()
	if !<-got {
		t.Fatal("a setup waiting for a place freed within catchUpWait was refused")
	}
	start := time.Now()
	if c.enter(context.Background()) {
		t.Fatal("a place taken past the bound")
	}
	if took := time.Since(start); took < catchUpWait/2 {
		t.Fatalf("refused after %v; want it to wait about catchUpWait (%v) first", took, catchUpWait)
	}
	if off := newCatchUp(target, -1); !off.enter(context.Background()) || off.yield(time.Now()) {
		t.Fatal("no bound: a place refused, or a halving taken")
	}
}

// Past the catch-up bound, a sync (WebSocket), a pull (HTTP, 503 with
// Retry-After) and a new connection (overloaded, then 1013) wait, then
// are told to come back; sends go on meanwhile; once places free up the
// same requests are served.
func TestCatchingUpPastTheBoundIsToldToComeBackWhileSendsGoOn(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.MaxCatchingUp = minCatchingUp }})
	e.group("busy", "alice", "bob")
	g := e.gws[0].g
	alice := e.login(0, "alice")
	for range minCatchingUp { // every place taken, as by clients catching up
		if !g.catchUp.enter(context.Background()) {
			t.Fatal("the bound is below its floor")
		}
	}
	if f := alice.call(map[string]any{"op": "sync"}); code(f) != string(protocol.CodeOverloaded) {
		t.Fatalf("a sync past the bound: %v, want overloaded", f)
	}
	req, _ := http.NewRequest("GET", e.gws[0].srv.URL+"/v1/groups/busy/messages", nil)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("an HTTP pull past the bound: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	bob := e.dial(0, "?token="+e.token("bob"))
	if f := bob.read(); code(f) != string(protocol.CodeOverloaded) {
		t.Fatalf("a connection past the bound: %v, want overloaded", f)
	}
	if _, err := bob.tryRead(5 * time.Second); websocket.CloseStatus(err) != websocket.StatusTryAgainLater {
		t.Fatalf("a connection past the bound ended with %v, want 1013 (try again later)", err)
	}
	if f := alice.call(map[string]any{"op": "send", "gid": "busy", "cmid": "c1", "body": "hello"}); f["op"] != protocol.OpAccepted {
		t.Fatalf("a send while clients catch up: %v, want accepted", f)
	}
	if st := g.Stats(); st.CatchUpRefused != 3 || st.Overloaded != 0 {
		t.Fatalf("%d setups, syncs and pulls refused, %d sends; want 3 and 0", st.CatchUpRefused, st.Overloaded)
	}
	for range minCatchingUp {
		g.catchUp.leave()
	}
	if f := alice.call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("a sync once places are free: %v", f)
	}
	if f := alice.call(map[string]any{"op": "pull", "gid": "busy"}); f["op"] != protocol.OpPage {
		t.Fatalf("a pull once places are free: %v", f)
	}
	e.login(0, "bob")
}
