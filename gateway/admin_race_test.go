package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/store"
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
	time.Sleep(2 * time.Second) // the projector catches up with every change written
	m, err := e.redis.Membership(context.Background(), "g1", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if m.State != store.MemberJoined {
		t.Fatalf("bob after a removal and an add: %v, want joined", m.State)
	}
}
