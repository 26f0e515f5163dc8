package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
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
	e.parts["members"].stop()
	if err := e.rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	for part := range 4 { // as the projector does when it notices the wipe
		if ok, err := e.redis.AdvanceOffset(context.Background(), consumers.GroupMemberProjector, topics.Members, part, -1, kafka.FirstOffset); !ok || err != nil {
			t.Fatalf("claiming partition %d: %v, %v", part, ok, err)
		}
	}
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
