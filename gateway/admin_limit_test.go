package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// A group's limit of members holds against adds that come together, or
// within the member projector's lag of one another: each counts the joins
// the others reserved, where it counted only the members the projector had
// applied and let each add pass. Once projected, a join counts once, and a
// removal makes room again.
func TestAddsAtOnceKeepTheGroupsLimitOfMembers(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.MaxMembers = 4 }})
	e.group("g1", "a")
	e.parts["members"].stop() // the projection lags
	before := e.topicEndsOf(topics.Members)
	add := func(uid string) (int, map[string]any) {
		return e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": uid})
	}
	// An add answered: the next ones count its join, not yet projected.
	if st, out := add("b"); st != 200 {
		t.Fatalf("add b: %d %v", st, out)
	}
	// Four adds at once for the two places left.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		added   []string
		refused []string
	)
	for _, uid := range []string{"c", "d", "e", "f"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, out := add(uid)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case st == 200:
				added = append(added, uid)
			case st == 400 && strings.Contains(fmt.Sprint(out["message"]), "limit of 4"):
				refused = append(refused, uid)
			default:
				t.Errorf("add %s: %d %v, want 200 or 400 naming the limit", uid, st, out)
			}
		}()
	}
	wg.Wait()
	if len(added) != 2 || len(refused) != 2 {
		t.Fatalf("four adds at once with a, b and two places: added %v, refused %v; want two of each", added, refused)
	}
	if n := e.topicEndsOf(topics.Members) - before; n != 3 {
		t.Fatalf("%d joins written, want 3 (b and two of the four)", n)
	}
	e.runConsumer("members", e.parts["members"].mk)
	e.waitMembers("g1", append([]string{"a", "b"}, added...)...)
	if st, out := add(refused[0]); st != 400 {
		t.Errorf("add %s to the full group, its joins projected: %d %v, want 400", refused[0], st, out)
	}
	e.removeMember("g1", "a")
	waitFor(t, "a's leave projected", 10*time.Second, func() bool {
		m, _ := e.redis.Membership(context.Background(), "g1", "a", nil)
		return m.State == store.MemberLeft
	})
	if st, out := add(refused[0]); st != 200 {
		t.Errorf("add %s after a's removal: %d %v, want 200", refused[0], st, out)
	}
	if st, out := add(refused[1]); st != 400 {
		t.Errorf("add %s, the group full again: %d %v, want 400", refused[1], st, out)
	}
}
