package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
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
