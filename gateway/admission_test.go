package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

func TestAdmissionHalvesOnSlowSendsAndGrowsBack(t *testing.T) {
	const target = 50 * time.Millisecond
	a := newAdmission(target, 64)
	for range 64 {
		if !a.enter() {
			t.Fatal("a send refused below the bound")
		}
	}
	if a.enter() {
		t.Fatal("a send past the bound of 64 taken")
	}
	// Many slow sends at one moment halve the bound once, not once each.
	for range 10 {
		a.leave(2 * target)
	}
	if got := a.bound(); got != 32 {
		t.Fatalf("bound %d after one slow moment, want 32", got)
	}
	a.cut = time.Now().Add(-target) // a target later, slow again
	a.leave(2 * target)
	if got := a.bound(); got != 16 {
		t.Fatalf("bound %d after a second slow moment, want 16", got)
	}
	for range 53 {
		a.leave(time.Millisecond)
	}
	if got := a.bound(); got < 17 || got > 20 {
		t.Fatalf("bound %d after 53 fast sends from 16, want it grown by about 3 (one per bound's worth)", got)
	}
	// The floor.
	for range 10 {
		a.cut = time.Time{}
		a.enter()
		a.leave(time.Hour)
	}
	if got := a.bound(); got != minSending {
		t.Fatalf("bound %d, want the floor %d", got, minSending)
	}
	// No target: no bound.
	off := newAdmission(-1, minSending)
	for range 1000 {
		if !off.enter() {
			t.Fatal("a send refused with admission off")
		}
	}
}

// Sends past the gateway's bound are refused at once as overloaded, with
// what to do, over WebSocket and HTTP alike; nothing reaches the log; and
// sends go through again once places free up.
func TestSendsPastTheBoundAreRefusedAsOverloaded(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.MaxSending = minSending }})
	e.group("busy", "alice", "bob")
	g := e.gws[0].g
	for range minSending { // every place taken, as by sends in flight
		if !g.admit.enter() {
			t.Fatal("the bound is below its floor")
		}
	}
	ends := e.topicEnds()
	a := e.login(0, "alice")
	f := a.call(map[string]any{"op": "send", "gid": "busy", "cmid": "c1", "body": "hello"})
	if code(f) != string(protocol.CodeOverloaded) || !strings.Contains(f["message"].(string), "same cmid") {
		t.Fatalf("a send past the bound: %v, want overloaded saying what to do", f)
	}
	status, body := e.http("POST", "/v1/groups/busy/messages", e.token("alice"), map[string]any{"cmid": "c2", "body": "hello"})
	if status != http.StatusServiceUnavailable || body["code"] != string(protocol.CodeOverloaded) {
		t.Fatalf("an HTTP send past the bound: %d %v, want 503 overloaded", status, body)
	}
	if got := e.topicEnds(); got != ends {
		t.Fatalf("refused sends reached the log: ends %d, want %d", got, ends)
	}
	if st := g.Stats(); st.Overloaded != 2 {
		t.Fatalf("%d sends counted as overloaded, want 2", st.Overloaded)
	}
	for range minSending {
		g.admit.leave(time.Millisecond)
	}
	f = a.call(map[string]any{"op": "send", "gid": "busy", "cmid": "c1", "body": "hello"})
	if f["op"] != protocol.OpAccepted {
		t.Fatalf("the resend once places are free: %v", f)
	}
}
