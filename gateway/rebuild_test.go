package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// A login's sync while the memberships are being rebuilt (Redis lost its
// data, the member projector replays) is answered unavailable, which the
// client retries, not with a list missing groups: a client told it is in
// no groups pulls none of their messages until its next login.
func TestASyncWhileMembershipsAreRebuiltIsUnavailable(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	alice := e.login(0, "alice")
	if f := alice.call(map[string]any{"op": "sync"}); fmt.Sprint(f["groups"]) == "[]" {
		t.Fatalf("sync before the loss: %v, want g1", f)
	}
	e.wipeMemberships()
	f := alice.call(map[string]any{"op": "sync"})
	if code(f) != string(protocol.CodeUnavailable) || !strings.Contains(fmt.Sprint(f["message"]), "being rebuilt") {
		t.Errorf("sync while the memberships are rebuilt: %v, want unavailable saying they are being rebuilt", f)
	}
	e.runConsumer("members", e.parts["members"].mk)
	e.waitMembers("g1", "alice")
	waitFor(t, "a sync naming g1", 10*time.Second, func() bool {
		f := alice.call(map[string]any{"op": "sync"})
		gs, _ := f["groups"].([]any)
		return len(gs) == 1
	})
}

// While the member projector replays chat.members into a wiped Redis, a
// member who left reads as joined between their join and their leave in
// the log. Until the projector has marked the partition replayed, none of
// their requests is answered on that reading: a send, a pull, an ack and a
// read are unavailable, and nothing is written. Once replayed, they are
// told they left.
func TestALeftMemberIsNotServedWhileMembershipsAreRebuilt(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	e.group("g1", "alice", "bob")
	join := e.lastMemberEvent("g1", "bob")
	e.removeMember("g1", "bob")
	alice, bob := e.login(0, "alice"), e.login(0, "bob")
	f := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "a1", "body": "after bob left"})
	if f["op"] != "accepted" {
		t.Fatalf("alice's send: %v", f)
	}
	after := f["msgid"]

	e.wipeMemberships()
	// The replay has applied bob's join, not yet his leave.
	if err := e.redis.ApplyMembers(ctx, []schema.Member{join}); err != nil {
		t.Fatal(err)
	}
	if m, err := e.redis.Membership(ctx, "g1", "bob", nil); err != nil || m.State != store.MemberJoined {
		t.Fatalf("bob halfway through the replay: %+v, %v; want joined", m, err)
	}
	ends := e.topicEnds()
	for _, req := range []map[string]any{
		{"op": "send", "gid": "g1", "cmid": "b1", "body": "after leaving"},
		{"op": "pull", "gid": "g1"},
		{"op": "ack", "gid": "g1", "upto": after},
		{"op": "read", "gid": "g1", "upto": after},
	} {
		f := bob.call(req)
		if code(f) != string(protocol.CodeUnavailable) || !strings.Contains(fmt.Sprint(f["message"]), "being rebuilt") {
			t.Errorf("bob's %s while the memberships are rebuilt: %v, want unavailable saying they are being rebuilt", req["op"], f)
		}
	}
	if st, out := e.http("GET", "/v1/groups/g1/messages", e.token("bob"), nil); st != 503 {
		t.Errorf("bob's pull over HTTP while the memberships are rebuilt: %d %v, want 503", st, out)
	}
	if got := e.topicEnds(); got != ends {
		t.Errorf("bob's requests while the memberships are rebuilt wrote %d records", got-ends)
	}

	e.runConsumer("members", e.parts["members"].mk)
	e.waitReplayed("g1")
	if f := bob.call(map[string]any{"op": "send", "gid": "g1", "cmid": "b1", "body": "after leaving"}); code(f) != string(protocol.CodeLeft) {
		t.Errorf("bob's send after the replay: %v, want left_group", f)
	}
}
