package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/topics"
)

// syncedGroup returns the sync's entry of gid, nil when it lists none.
func syncedGroup(s map[string]any, gid string) map[string]any {
	gs, _ := s["groups"].([]any)
	for _, g := range gs {
		if g := g.(map[string]any); g["gid"] == gid {
			return g
		}
	}
	return nil
}

// A group the user left is listed by the sync while something of it from
// before the leave waits (not acked or not read), and no longer once both
// cursors reached the last message before the leave: before, every group
// ever left stayed in every sync, and a user who had left thousands paid
// a Redis script for each at every login. What came before the leave can
// still be pulled; an add brings the group back.
func TestALeftGroupDropsOutOfTheSyncOnceReadToTheLeave(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "dave")
	alice, dave := e.login(0, "alice"), e.login(0, "dave")
	last := sendHi(t, alice, "g1", "a1")
	e.removeMember("g1", "dave")
	sendHi(t, alice, "g1", "a2") // after the leave: never dave's

	g := syncedGroup(dave.call(map[string]any{"op": "sync", "id": "s1"}), "g1")
	if g == nil || g["left"] != true || g["head"] != float64(last) {
		t.Fatalf("dave's sync with a1 not yet read lists g1 as %v; want it left, head %d", g, last)
	}
	for _, op := range []string{"ack", "read"} {
		if f := dave.call(map[string]any{"op": op, "id": op, "gid": "g1", "upto": last}); f["op"] != "ok" {
			t.Fatalf("%s of g1 up to the leave: %v", op, f)
		}
	}
	e.waitProjected(consumers.GroupAckProjector, topics.Acks, "g1")
	e.waitProjected(consumers.GroupReceiptProjector, topics.Receipts, "g1")
	for i := range 2 { // the second from what the first noted
		if g := syncedGroup(dave.call(map[string]any{"op": "sync", "id": "s2"}), "g1"); g != nil {
			t.Fatalf("sync %d after dave acked and read g1 to its leave lists it: %v; want it left out", i+2, g)
		}
	}
	p := dave.call(map[string]any{"op": "pull", "id": "p", "gid": "g1", "after": -1})
	if ms, _ := p["msgs"].([]any); len(ms) != 1 || p["head"] != float64(last) {
		t.Errorf("dave's pull of g1 after it left his sync: %v; want a1 alone, head %d", p, last)
	}
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "dave"}); st != 200 {
		t.Fatalf("add dave back: %d %v", st, out)
	}
	e.waitMembers("g1", "alice", "dave")
	waitFor(t, "g1 back in dave's sync", 10*time.Second, func() bool {
		g := syncedGroup(dave.call(map[string]any{"op": "sync", "id": "s3"}), "g1")
		return g != nil && g["left"] == nil
	})
}

// A left group with something unread is listed for LeftListed after a sync
// first listed it as left, then no more: a user who never reads what came
// before leaving must not keep every group ever left in his sync.
func TestALeftGroupLeftUnreadDropsOutOfTheSyncInTime(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.LeftListed = 2 * time.Second }})
	e.group("g1", "alice", "dave")
	e.group("g2", "alice", "dave")
	alice, dave := e.login(0, "alice"), e.login(0, "dave")
	sendHi(t, alice, "g1", "a1")
	sendHi(t, alice, "g2", "b1")
	e.removeMember("g1", "dave")
	first := time.Now()
	if g := syncedGroup(dave.call(map[string]any{"op": "sync", "id": "s1"}), "g1"); g == nil || g["left"] != true {
		t.Fatalf("dave's first sync after leaving lists g1 as %v; want it left", g)
	}
	if time.Since(first) < 1500*time.Millisecond {
		if g := syncedGroup(dave.call(map[string]any{"op": "sync", "id": "s2"}), "g1"); g == nil {
			t.Fatalf("g1 left out of a sync within LeftListed of the first that listed it as left")
		}
	}
	time.Sleep(time.Until(first.Add(2500 * time.Millisecond)))
	s := dave.call(map[string]any{"op": "sync", "id": "s3"})
	if g := syncedGroup(s, "g1"); g != nil {
		t.Errorf("sync past LeftListed lists the left, unread g1: %v", g)
	}
	if g := syncedGroup(s, "g2"); g == nil || g["unread"] != float64(1) {
		t.Errorf("sync lists g2, still joined, as %v; want it with 1 unread", g)
	}
}

// A left group whose head in Redis lags the log (the persister behind)
// is not dropped from the sync on the strength of that head: a message
// sent before the leave and not yet persisted, whose push was lost, would
// never come. It is dropped only once the persister has stored the
// partition past the leave.
func TestALeftGroupIsNotDroppedOnAHeadThatLagsTheLeave(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "dave")
	alice, dave := e.login(0, "alice"), e.login(0, "dave")
	first := sendHi(t, alice, "g1", "a1")
	waitFor(t, "a1 persisted", 10*time.Second, func() bool {
		h, _ := e.redis.Head(context.Background(), "g1")
		return h == first
	})
	for _, op := range []string{"ack", "read"} {
		if f := dave.call(map[string]any{"op": op, "id": op, "gid": "g1", "upto": first}); f["op"] != "ok" {
			t.Fatalf("%s of g1 up to a1: %v", op, f)
		}
	}
	e.waitProjected(consumers.GroupAckProjector, topics.Acks, "g1")
	e.waitProjected(consumers.GroupReceiptProjector, topics.Receipts, "g1")
	e.parts["persister"].stop()  // the head in Redis stays at a1 from here
	sendHi(t, alice, "g1", "a2") // before the leave: dave's, not yet persisted
	e.removeMember("g1", "dave")
	for i := range 2 {
		if g := syncedGroup(dave.call(map[string]any{"op": "sync", "id": fmt.Sprint("s", i)}), "g1"); g == nil || g["left"] != true {
			t.Fatalf("sync %d of dave, acked and read to a1, with a2 before his leave not yet persisted, lists g1 as %v; want it listed as left", i+1, g)
		}
	}
}
