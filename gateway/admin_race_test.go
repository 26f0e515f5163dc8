package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// An admin who removes a member and adds them back, each call answered
// before the member projector has the removal, has them as a member at the
// end: the add is not taken for a no-op because the removal it follows is
// not projected yet.
func TestARemovalAndAnAddBeforeItsProjectionEndWithAMember(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	e.parts["members"].stop() // the projection lags
	if st, out := e.http("DELETE", "/v1/admin/groups/g1/members/bob", adminToken, nil); st != 200 {
		t.Fatalf("remove bob: %d %v", st, out)
	}
	st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "bob"})
	if st != 200 || fmt.Sprint(out["added"]) != "[bob]" {
		t.Errorf("add bob back right after his removal: %d %v, want him added", st, out)
	}
	e.runConsumer("members", e.parts["members"].mk)
	e.waitProjected(consumers.GroupMemberProjector, topics.Members, "g1") // every change written
	m, err := e.redis.Membership(context.Background(), "g1", "bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != store.MemberJoined {
		t.Fatalf("bob after a removal and an add: %v, want joined", m.State)
	}
}

// An admin's retry of "remove bob" that comes before the member projector
// has the first leave writes no second one: compaction keeps a member's
// last record, and a second leave, at a later head, would after a rebuild
// show bob what was sent between the two.
func TestARetriedRemovalBeforeItsProjectionIsWrittenOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	e.parts["members"].stop() // the projection lags
	alice := e.login(0, "alice")
	before := e.topicEndsOf(topics.Members)
	for i, want := range []int{200, 404} { // the retry, as after the projection: not a member
		if st, out := e.http("DELETE", "/v1/admin/groups/g1/members/bob", adminToken, nil); st != want {
			t.Fatalf("remove bob (%d): %d %v, want %d", i, st, out, want)
		}
		if f := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": fmt.Sprint("a", i), "body": "not for bob"}); f["op"] != "accepted" {
			t.Fatalf("send: %v", f)
		}
	}
	if n := e.topicEndsOf(topics.Members) - before; n != 2 {
		t.Errorf("removing bob twice before the projection wrote %d member records, want 2 (its leaving and one leave)", n)
	}
	e.runConsumer("members", e.parts["members"].mk)
	waitFor(t, "bob left", 10*time.Second, func() bool {
		m, _ := e.redis.Membership(context.Background(), "g1", "bob", nil)
		return m.State == store.MemberLeft
	})
	if ev := e.lastMemberEvent("g1", "bob"); ev.Op != schema.OpLeave {
		t.Fatalf("bob's last member record: %+v, want a leave", ev)
	} else if m, _ := e.redis.Membership(context.Background(), "g1", "bob", nil); ev.Pos != m.LeftAt {
		t.Errorf("bob's last member record leaves at %d, but he left at %d: a rebuild would show him what was sent in between", ev.Pos, m.LeftAt)
	}
}

// A member added by a call already answered, before the member projector
// has the join, is told to retry (unavailable), not not_member, which
// clients give up on.
func TestAMemberAddedBeforeTheProjectionIsToldToRetry(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	carol := e.login(0, "carol")
	e.parts["members"].stop() // the projection lags
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "carol"}); st != 200 {
		t.Fatalf("add carol: %d %v", st, out)
	}
	if f := carol.call(map[string]any{"op": "send", "gid": "g1", "cmid": "c1", "body": "hi"}); code(f) != string(protocol.CodeUnavailable) {
		t.Errorf("carol's send right after she was added: %v, want unavailable (retry)", f)
	}
	if f := carol.call(map[string]any{"op": "pull", "gid": "g1"}); code(f) != string(protocol.CodeUnavailable) {
		t.Errorf("carol's pull right after she was added: %v, want unavailable (retry)", f)
	}
	e.runConsumer("members", e.parts["members"].mk)
	e.waitMembers("g1", "carol")
	if f := carol.call(map[string]any{"op": "send", "gid": "g1", "cmid": "c1", "body": "hi"}); f["op"] != "accepted" {
		t.Errorf("carol's send once her join is projected: %v", f)
	}
}

// A member removed by a call already answered, before the member projector
// has the leave, cannot send any more: the send is refused (left_group),
// not accepted from one who is no longer a member.
func TestAMemberRemovedBeforeTheProjectionCannotSend(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	alice, bob := e.login(0, "alice"), e.login(0, "bob")
	e.parts["members"].stop() // the projection lags
	if st, out := e.http("DELETE", "/v1/admin/groups/g1/members/bob", adminToken, nil); st != 200 {
		t.Fatalf("remove bob: %d %v", st, out)
	}
	if f := bob.call(map[string]any{"op": "send", "gid": "g1", "cmid": "b1", "body": "after my removal"}); code(f) != string(protocol.CodeLeft) {
		t.Errorf("bob's send right after his removal: %v, want left_group", f)
	}
	if f := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "a1", "body": "not for bob"}); f["op"] != "accepted" {
		t.Fatalf("alice's send: %v", f)
	}
	// Added back, a join at the new head, he sends again.
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "bob"}); st != 200 || fmt.Sprint(out["added"]) != "[bob]" {
		t.Fatalf("add bob back: %d %v", st, out)
	}
	e.runConsumer("members", e.parts["members"].mk)
	waitFor(t, "bob joined again", 10*time.Second, func() bool {
		m, _ := e.redis.Membership(context.Background(), "g1", "bob", nil)
		return m.State == store.MemberJoined && m.JoinedAt >= 0
	})
	if f := bob.call(map[string]any{"op": "send", "gid": "g1", "cmid": "b2", "body": "back"}); f["op"] != "accepted" {
		t.Errorf("bob's send once added back: %v", f)
	}
}

// A removal right after an add, before the member projector has the join,
// is told to retry (unavailable), not that the member is not one (404):
// they will be, once the join is projected, and the removal then works.
func TestARemovalRightAfterAnAddIsToldToRetry(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	e.parts["members"].stop() // the projection lags
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "carol"}); st != 200 {
		t.Fatalf("add carol: %d %v", st, out)
	}
	if st, out := e.http("DELETE", "/v1/admin/groups/g1/members/carol", adminToken, nil); st != 503 || code(out) != string(protocol.CodeUnavailable) {
		t.Errorf("remove carol right after her add: %d %v, want 503 unavailable", st, out)
	}
	e.runConsumer("members", e.parts["members"].mk)
	e.waitMembers("g1", "carol")
	e.removeMember("g1", "carol")
}

// A member removed by a call already answered, before the member projector
// has the leave, sees nothing sent after it: a pull stops at the leave,
// and an ack past it is refused.
func TestAMemberRemovedBeforeTheProjectionSeesNothingAfter(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	alice, bob := e.login(0, "alice"), e.login(0, "bob")
	send := func(cmid string) int64 {
		f := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": cmid, "body": cmid})
		if f["op"] != "accepted" {
			t.Fatalf("alice's send: %v", f)
		}
		return int64(f["msgid"].(float64))
	}
	before := send("before")
	e.parts["members"].stop() // the projection lags
	if st, out := e.http("DELETE", "/v1/admin/groups/g1/members/bob", adminToken, nil); st != 200 {
		t.Fatalf("remove bob: %d %v", st, out)
	}
	after := send("after")
	var page map[string]any
	waitFor(t, "alice's messages persisted", 10*time.Second, func() bool {
		page = alice.call(map[string]any{"op": "pull", "gid": "g1"})
		msgs, _ := page["msgs"].([]any)
		return len(msgs) == 2
	})
	page = bob.call(map[string]any{"op": "pull", "gid": "g1"})
	msgs, _ := page["msgs"].([]any)
	if len(msgs) != 1 || int64(msgs[0].(map[string]any)["msgid"].(float64)) != before {
		t.Errorf("bob's pull after his removal: %v, want only msgid %d, sent before it", page, before)
	}
	if f := bob.call(map[string]any{"op": "ack", "gid": "g1", "upto": after}); code(f) != string(protocol.CodeLeft) {
		t.Errorf("bob's ack of msgid %d, sent after his removal: %v, want left_group", after, f)
	}
}

// A member removed and added back, before the member projector has the
// new join, is told to retry a send (unavailable), not that they left,
// which clients give up on.
func TestAMemberAddedBackBeforeTheProjectionIsToldToRetry(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	bob := e.login(0, "bob")
	e.removeMember("g1", "bob")
	// Projected, not only noted: a leave the projector has yet to apply
	// would be undone by the add's clearing of its note.
	e.waitProjected(consumers.GroupMemberProjector, topics.Members, "g1")
	e.parts["members"].stop() // the projection lags
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "bob"}); st != 200 || fmt.Sprint(out["added"]) != "[bob]" {
		t.Fatalf("add bob back: %d %v", st, out)
	}
	if f := bob.call(map[string]any{"op": "send", "gid": "g1", "cmid": "b1", "body": "back"}); code(f) != string(protocol.CodeUnavailable) {
		t.Errorf("bob's send right after he was added back: %v, want unavailable (retry)", f)
	}
	e.runConsumer("members", e.parts["members"].mk)
	waitFor(t, "bob's send once his join is projected", 10*time.Second, func() bool {
		return bob.call(map[string]any{"op": "send", "gid": "g1", "cmid": "b1", "body": "back"})["op"] == "accepted"
	})
}

// An admin tool that retries a large create group while the first call
// still runs, and then gives the first one up (its timeout), gets every
// member added: the joins the first call had noted but not yet written are
// not dropped after the retry, finding them noted, answered without them.
func TestACreateGroupRetriedWhileRunningAndGivenUpAddsEveryMember(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.waitReplayed("big")
	members := make([]string, 3000)
	for i := range members {
		members[i] = fmt.Sprint("u", i)
	}
	body, _ := json.Marshal(map[string]any{"gid": "big", "members": members})
	post := func(ctx context.Context) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", e.gws[0].srv.URL+"/v1/admin/groups", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		return http.DefaultClient.Do(req)
	}
	first, giveUp := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		resp, err := post(first)
		if err == nil {
			resp.Body.Close()
		}
		firstDone <- err
	}()
	waitFor(t, "the first call to note its joins", 10*time.Second, func() bool {
		ok, _ := e.redis.Joining(context.Background(), "big", "u2999")
		return ok
	})
	retryDone := make(chan *http.Response, 1)
	go func() {
		resp, err := post(context.Background())
		if err != nil {
			t.Error(err)
		}
		retryDone <- resp
	}()
	resp := <-retryDone // answered at once: every uid is noted
	if resp == nil {
		t.FailNow()
	}
	resp.Body.Close()
	giveUp()
	if err := <-firstDone; err == nil {
		t.Fatal("the first call was answered before it was given up; the test needs it running then")
	}
	if resp.StatusCode != 200 {
		t.Fatalf("the retried create group: %s", resp.Status)
	}
	waitFor(t, "every member of big", 30*time.Second, func() bool {
		ms, err := e.redis.Members(context.Background(), "big")
		n := 0
		for _, m := range ms {
			if m.State == store.MemberJoined {
				n++
			}
		}
		return err == nil && n == len(members)
	})
}
