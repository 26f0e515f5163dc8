package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
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

// An add's reservation holds its place for as long as its joins take to
// write: it was taken for JoinHold from the reservation, so a join whose
// write took longer (a broker slow to answer, a create of thousands of
// members written one by one) lost its place before it was written.
// Another add then took the place, and the group passed its limit; a
// retry of the add found no reservation and wrote a second join.
func TestAReservationHoldsItsPlaceWhileTheJoinIsWritten(t *testing.T) {
	const hold = 300 * time.Millisecond
	e := newEnv(t, envOpts{tune: func(c *Config) { c.MaxMembers, c.JoinHold = 2, hold }})
	e.group("g1", "a")
	before := e.topicEndsOf(topics.Members)

	// The broker takes the next writes to chat.members in, and answers
	// none until released.
	free := testserver.HoldProduces(t, e.broker, topics.Members)

	add := func(uid string) (int, map[string]any) {
		return e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": uid})
	}
	type answer struct {
		st  int
		out map[string]any
	}
	b := make(chan answer, 1)
	go func() { st, out := add("b"); b <- answer{st, out} }()
	waitFor(t, "b's place reserved", 10*time.Second, func() bool {
		ok, _ := e.redis.Joining(context.Background(), "g1", "b")
		return ok
	})
	time.Sleep(4 * hold) // the write of b's join outlasts the hold: time must pass
	if ok, err := e.redis.Joining(context.Background(), "g1", "b"); !ok || err != nil {
		t.Errorf("b's join still being written after %v, its hold %v: Joining = %v, %v; want its place held", 4*hold, hold, ok, err)
	}
	// An add of c, the group holding a and b, is refused at once; one
	// that took b's place would wait on the broker like b's.
	cAns := make(chan answer, 1)
	go func() { st, out := add("c"); cAns <- answer{st, out} }()
	var got answer
	select {
	case got = <-cAns:
	case <-time.After(5 * time.Second):
		free()
		got = <-cAns
	}
	if got.st != 400 || !strings.Contains(fmt.Sprint(got.out["message"]), "limit of 2") {
		t.Errorf("add c while b's join is written: %d %v, want 400 naming the limit", got.st, got.out)
	}
	free()
	if got := <-b; got.st != 200 {
		t.Fatalf("add b: %d %v", got.st, got.out)
	}
	e.waitMembers("g1", "a", "b")
	if n := e.topicEndsOf(topics.Members) - before; n != 1 {
		t.Errorf("%d joins written, want 1 (b's)", n)
	}
}
