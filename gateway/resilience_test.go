package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
)

// cut closes every connection of uid on gateway i, as a network drop or the
// gateway's slow-client cut would.
func (e *env) cut(i int, uid string, code websocket.StatusCode) {
	e.gws[i].g.hub.each(uid, func(c *conn) { c.close(code, "cut by the test") })
}

// While a sender streams messages, members are reconnected, lose pushes, are
// cut as slow, and the fan-out restarts. Every member must still deliver every
// message exactly once, in order, and no ack cursor may ever pass a message
// its member has not delivered.
func TestEveryMessageOnceThroughFaults(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 2})
	uids := []string{"s", "m0", "m1", "m2", "m3", "m4"}
	e.group("g", uids...)
	var dropping atomic.Value
	dropping.Store("")
	for _, x := range e.gws {
		x.g.dropPush = func(uid string) bool { return dropping.Load().(string) == uid }
	}
	members := map[string]*member{}
	for i, u := range uids {
		members[u] = e.connect(i%2, u, nil)
	}
	time.Sleep(100 * time.Millisecond)
	ctx := context.Background()

	// Watch cursors: an ack cursor never passes what its member delivered.
	stopWatch := make(chan struct{})
	watchErr := make(chan error, 1)
	go func() {
		defer close(watchErr)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
			cur, err := e.redis.AckCursors(ctx, "g")
			if err != nil {
				continue
			}
			for uid, c := range cur {
				if c <= e.joinPos(uid) {
					continue // the position the member started at
				}
				if d := members[uid].delivered("g"); !slices.Contains(d, c) {
					watchErr <- fmt.Errorf("%s's ack cursor %d is not a message it delivered (last delivered %v)", uid, c, tail(d))
					return
				}
			}
		}
	}()

	const n = 150
	var want []int64
	sender := members["s"]
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < n; i++ {
		id, err := sender.c.Send(ctx, "g", fmt.Sprint("message ", i))
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		want = append(want, id)
		switch i {
		case 20: // reconnects racing with in-flight messages
			e.cut(0, "m0", websocket.StatusGoingAway)
			e.cut(1, "m1", websocket.StatusGoingAway)
		case 40: // pushes to m2 are lost for a while
			dropping.Store("m2")
		case 60:
			dropping.Store("")
		case 80: // the fan-out restarts: prev is unknown for a while
			e.fanout()
			e.startFanout()
		case 110: // a slow client is cut
			e.cut(0, "m4", CloseTooSlow)
		}
		time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	}
	for _, u := range uids {
		m := members[u]
		waitFor(t, u+" delivers all", 30*time.Second, func() bool { return len(m.delivered("g")) >= n })
		m.checkExactlyOnceInOrder(t, "g", want)
	}
	close(stopWatch)
	if err := <-watchErr; err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		m.c.Close()
	}
	e.waitAcks("g", want[n-1], uids...)
	if st := members["m2"].c.Stats(); st.Gaps == 0 {
		t.Errorf("m2 lost pushes but saw no gap: %+v", st)
	}
}

func (e *env) joinPos(uid string) int64 {
	m, _ := e.redis.Membership(context.Background(), "g", uid, nil)
	return m.JoinedAt
}

func tail(d []int64) []int64 {
	if len(d) > 5 {
		return d[len(d)-5:]
	}
	return d
}

// TestMembershipsRedisLostAreUnavailableNotNotMember: after Redis lost its
// data and before the member projector has replayed chat.members (whether
// or not it has claimed its partitions again), a member reads as never
// joined. The gateway says to retry (unavailable), which
// clients do, rather than not_member, which they give up on; once the
// projector has replayed, the member sends again and a stranger is told
// not_member.
func TestMembershipsRedisLostAreUnavailableNotNotMember(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	alice, carol := e.login(0, "alice"), e.login(0, "carol")
	send := func(r *raw, cmid string) map[string]any {
		return r.call(map[string]any{"op": "send", "gid": "g1", "cmid": cmid, "body": "hi"})
	}
	if f := send(alice, "a1"); f["op"] != "accepted" {
		t.Fatalf("alice's send before the loss: %v", f)
	}

	e.parts["members"].stop() // it would notice within 2 s and replay
	if err := e.rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	// As the projector does first when it notices: it claims the start of
	// every partition, then replays. Claimed is not replayed.
	for part := range 4 {
		if ok, err := e.redis.AdvanceOffset(context.Background(), consumers.GroupMemberProjector, topics.Members, part, -1, kafka.FirstOffset); !ok || err != nil {
			t.Fatalf("claiming partition %d: %v, %v", part, ok, err)
		}
	}
	for _, who := range []struct {
		r    *raw
		cmid string
	}{{alice, "a2"}, {carol, "c1"}} {
		f := send(who.r, who.cmid)
		if code(f) != string(protocol.CodeUnavailable) || !strings.Contains(fmt.Sprint(f["message"]), "being rebuilt") {
			t.Errorf("send while the memberships are gone: %v, want unavailable saying they are being rebuilt", f)
		}
	}
	if st, out := e.http("GET", "/v1/groups/g1/messages", e.token("alice"), nil); st != 503 {
		t.Errorf("pull over HTTP while the memberships are gone: %d %v, want 503", st, out)
	}

	e.runConsumer("members", e.parts["members"].mk)
	e.waitMembers("g1", "alice", "bob")
	e.waitReplayed("g1") // the mark follows the memberships
	if f := send(alice, "a2"); f["op"] != "accepted" {
		t.Errorf("alice's send after the replay: %v", f)
	}
	if f := send(carol, "c1"); code(f) != string(protocol.CodeNotMember) {
		t.Errorf("carol's send after the replay: %v, want not_member", f)
	}
}

// TestMembershipsBeingRebuiltAreNotChangedByAdministration: while Redis's
// memberships are being rebuilt, a member reads as absent; adding them
// again (an admin's tool retrying, a group created again) would write a
// second join at the group's head, and once replayed they would have lost
// every message from before it. Administration answers unavailable then,
// writes nothing, and the member keeps their history.
func TestMembershipsBeingRebuiltAreNotChangedByAdministration(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	bob := e.login(0, "bob")
	if f := bob.call(map[string]any{"op": "send", "gid": "g1", "cmid": "b1", "body": "for alice"}); f["op"] != "accepted" {
		t.Fatalf("send: %v", f)
	}

	e.wipeMemberships()
	ends := e.topicEndsOf(topics.Members)
	for _, c := range []struct {
		method, path, token string
		body                any
	}{
		{"POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "alice"}},
		{"POST", "/v1/admin/groups", adminToken, map[string]any{"gid": "g1", "members": []string{"alice", "bob"}}},
		{"DELETE", "/v1/admin/groups/g1/members/bob", adminToken, nil},
		{"POST", "/v1/dev/groups", e.token("carol"), map[string]any{"gid": "g1"}},
	} {
		st, out := e.http(c.method, c.path, c.token, c.body)
		if st != 503 || code(out) != string(protocol.CodeUnavailable) || !strings.Contains(fmt.Sprint(out["message"]), "being rebuilt") {
			t.Errorf("%s %s while the memberships are rebuilt: %d %v, want 503 unavailable saying they are being rebuilt", c.method, c.path, st, out)
		}
	}
	if got := e.topicEndsOf(topics.Members); got != ends {
		t.Errorf("administration while the memberships are rebuilt wrote %d membership changes", got-ends)
	}

	e.runConsumer("members", e.parts["members"].mk)
	e.waitMembers("g1", "alice")
	e.waitReplayed("g1") // the mark follows the memberships
	alice := e.login(0, "alice")
	var page map[string]any
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if page = alice.call(map[string]any{"op": "pull", "gid": "g1"}); page["op"] == "page" && len(page["msgs"].([]any)) == 1 {
			return
		}
	}
	t.Fatalf("alice's pull after the replay: %v, want bob's message from before", page)
}
