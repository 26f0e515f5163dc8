package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/groupchat/chatd/topics"
)

// A user's groups are bounded (MaxGroupsPerUser): an add that would put
// one past it is refused whole, naming who is at the limit and the setting
// to raise, and writes nothing to chat.members; adds within it go on. The
// count follows leaves and joins, and is the same after the memberships
// are rebuilt from chat.members.
func TestAnAddPastTheGroupsLimitOfAUserIsRefusedWhole(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.MaxGroupsPerUser = 2 }})
	e.group("g1", "alice", "bob")
	e.group("g2", "alice")
	refused := func(what string, st int, out map[string]any) {
		t.Helper()
		msg, _ := out["message"].(string)
		if st != 400 || out["code"] != "invalid" || !strings.Contains(msg, "alice") || strings.Contains(msg, "carol") ||
			!strings.Contains(msg, "CHAT_MAX_GROUPS_PER_USER") || !strings.Contains(msg, "2") {
			t.Fatalf("%s: %d %v; want 400 invalid naming alice alone, the limit of 2 and CHAT_MAX_GROUPS_PER_USER", what, st, out)
		}
	}
	before := e.topicEndsOf(topics.Members)
	st, out := e.http("POST", "/v1/admin/groups", adminToken, map[string]any{"gid": "g3", "members": []string{"carol", "alice"}})
	refused("create g3 with alice, in 2 groups already, and carol", st, out)
	e.waitReplayed("g1")
	st, out = e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "alice"}) // a member already: no join
	if st != 200 {
		t.Fatalf("add alice to g1, of which she is a member: %d %v; want 200, nothing added", st, out)
	}
	if n := e.topicEndsOf(topics.Members) - before; n != 0 {
		t.Fatalf("%d records written to %s by adds refused or of no one", n, topics.Members)
	}
	e.group("g3", "carol", "bob") // within the limit
	st, out = e.http("POST", "/v1/admin/groups/g3/members", adminToken, map[string]any{"uid": "alice"})
	refused("add alice to g3", st, out)

	e.removeMember("g1", "alice") // makes room
	if st, out := e.http("POST", "/v1/admin/groups/g3/members", adminToken, map[string]any{"uid": "alice"}); st != 200 {
		t.Fatalf("add alice to g3 after she left g1: %d %v", st, out)
	}
	e.waitMembers("g3", "carol", "bob", "alice")
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "alice"}); st != 400 {
		t.Fatalf("add alice back to g1, in g2 and g3: %d %v; want 400", st, out)
	}

	// Rebuilt from the log, the count is what it was.
	e.wipeMemberships()
	e.runConsumer("members", e.parts["members"].mk)
	for _, gid := range []string{"g1", "g2", "g3"} {
		e.waitReplayed(gid)
	}
	n, err := e.redis.GroupCounts(context.Background(), []string{"alice", "bob", "carol", "dave"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{2, 2, 1, 0}; n[0] != want[0] || n[1] != want[1] || n[2] != want[2] || n[3] != want[3] {
		t.Fatalf("groups of alice, bob, carol, dave after a rebuild: %v, want %v", n, want)
	}
	st, out = e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "alice"})
	refused("add alice back to g1 after the rebuild", st, out)
}

// A user's limit of groups holds against adds that come together, or
// within the member projector's lag of one another: each counts the joins
// of the user the others reserved, not only those projected.
func TestAddsAtOnceKeepAUsersLimitOfGroups(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.MaxGroupsPerUser = 3 }})
	e.group("g1", "alice")
	for _, gid := range []string{"g2", "g3", "g4", "g5", "g6"} {
		e.group(gid, "bob-"+gid)
	}
	e.parts["members"].stop() // the projection lags
	before := e.topicEndsOf(topics.Members)
	add := func(gid string) (int, map[string]any) {
		return e.http("POST", "/v1/admin/groups/"+gid+"/members", adminToken, map[string]any{"uid": "alice"})
	}
	if st, out := add("g2"); st != 200 {
		t.Fatalf("add alice to g2: %d %v", st, out)
	}
	var (
		wg             sync.WaitGroup
		mu             sync.Mutex
		added, refused []string
	)
	for _, gid := range []string{"g3", "g4", "g5", "g6"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, out := add(gid)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case st == 200:
				added = append(added, gid)
			case st == 400 && strings.Contains(fmt.Sprint(out["message"]), "CHAT_MAX_GROUPS_PER_USER"):
				refused = append(refused, gid)
			default:
				t.Errorf("add alice to %s: %d %v, want 200 or 400 naming CHAT_MAX_GROUPS_PER_USER", gid, st, out)
			}
		}()
	}
	wg.Wait()
	if len(added) != 1 || len(refused) != 3 {
		t.Fatalf("four adds of alice at once, in g1 and being added to g2, limit 3: added to %v, refused %v; want one added", added, refused)
	}
	if n := e.topicEndsOf(topics.Members) - before; n != 2 {
		t.Fatalf("%d joins written, want 2 (g2 and one of the four)", n)
	}
	e.runConsumer("members", e.parts["members"].mk)
	e.waitMembers(added[0], "bob-"+added[0], "alice")
	e.waitMembers("g2", "bob-g2", "alice")
	if n, err := e.redis.GroupCounts(context.Background(), []string{"alice"}); err != nil || n[0] != 3 {
		t.Fatalf("alice's groups, her joins projected: %v %v, want 3", n, err)
	}
	if st, out := add(refused[0]); st != 400 {
		t.Errorf("add alice to %s, at her limit: %d %v, want 400", refused[0], st, out)
	}
	e.removeMember("g1", "alice")
	if st, out := add(refused[0]); st != 200 {
		t.Errorf("add alice to %s after she left g1: %d %v, want 200", refused[0], st, out)
	}
}
