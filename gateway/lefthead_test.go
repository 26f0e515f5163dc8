package gateway

import (
	"context"
	"testing"
	"time"
)

// A member who left is given, as the group's head, the newest message they
// see: their leave's position is the head of a partition that other groups
// share, no message of theirs. Told it, a client that has read everything
// shows "0+" unread for good and pulls again at every heartbeat.
func TestAMemberWhoLeftIsGivenTheirLastMessageAsTheHead(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	other := samePartition(t, "g1")
	e.group("g1", "alice", "dave")
	e.group(other, "bob")
	alice, bob := e.login(0, "alice"), e.login(0, "bob")
	last := sendHi(t, alice, "g1", "a1")
	sendHi(t, bob, other, "b1") // the leave's position is past it
	e.removeMember("g1", "dave")
	after := sendHi(t, alice, "g1", "a2")
	waitFor(t, "g1 persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(ctx, "g1"); return h == after })
	dave := e.login(0, "dave")
	if f := dave.call(map[string]any{"op": "read", "id": "r", "gid": "g1", "upto": last}); f["op"] != "ok" {
		t.Fatalf("read: %v", f)
	}
	waitFor(t, "dave's read projected", 10*time.Second, func() bool {
		c, _ := e.redis.MemberCursors(ctx, "dave", []string{"g1"})
		return c["g1"].Read == last
	})
	s := dave.call(map[string]any{"op": "sync", "id": "s"})
	found := false
	for _, g := range s["groups"].([]any) {
		g := g.(map[string]any)
		if g["gid"] != "g1" {
			continue
		}
		found = true
		if g["head"] != float64(last) || g["unread"] != float64(0) || g["unread_exact"] != true || g["left"] != true {
			t.Errorf("dave, who left after message %d and read it, synced %v; want head %d, unread 0 exact, left", last, g, last)
		}
	}
	if !found {
		t.Fatalf("dave's sync %v lacks g1", s)
	}
	p := dave.call(map[string]any{"op": "pull", "id": "p", "gid": "g1", "after": -1})
	if p["head"] != float64(last) || p["more"] == true || len(p["msgs"].([]any)) != 1 {
		t.Errorf("dave's pull = %v; want message %d alone, head %d, no more", p, last, last)
	}
}

// A leave written and not yet projected (the member projector lags) is
// taken as projected by sync as it is by pull: before, sync showed the
// member joined, with the messages after the leave counted unread, which
// a pull then did not give.
func TestASyncTakesALeaveNotYetProjected(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	e.group("g1", "alice", "dave")
	alice, dave := e.login(0, "alice"), e.login(0, "dave")
	last := sendHi(t, alice, "g1", "a1")
	m, err := e.redis.Membership(ctx, "g1", "dave", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.redis.MarkLeaving(ctx, "g1", "dave", m.JoinedAt, last, time.Minute); err != nil { // the leave's record is not projected
		t.Fatal(err)
	}
	after := sendHi(t, alice, "g1", "a2")
	waitFor(t, "g1 persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(ctx, "g1"); return h == after })
	s := dave.call(map[string]any{"op": "sync", "id": "s"})
	var got map[string]any
	for _, g := range s["groups"].([]any) {
		if g := g.(map[string]any); g["gid"] == "g1" {
			got = g
		}
	}
	if got["left"] != true || got["head"] != float64(last) || got["unread"] != float64(0) {
		t.Errorf("dave, whose leave after message %d is written, synced %v; want left, head %d, unread 0", last, got, last)
	}
	p := dave.call(map[string]any{"op": "pull", "id": "p", "gid": "g1", "after": -1})
	if msgs := p["msgs"].([]any); len(msgs) != 1 {
		t.Errorf("dave's pull = %v; want message %d alone", p, last)
	}
}
