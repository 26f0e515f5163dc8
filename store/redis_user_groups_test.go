package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// testGroupCounts: a user's count of groups follows joins and leaves, a
// replay of the same events changes nothing, and an index written before
// the count was kept is counted once from its memberships.
func testGroupCounts(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	count := func(want ...int64) {
		t.Helper()
		got, err := r.GroupCounts(ctx, []string{"alice", "bob", "nobody"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("groups of alice, bob, nobody: %v, want %v", got, want)
		}
	}
	evs := []schema.Member{
		{Gid: "g1", Uid: "alice", Op: schema.OpJoin, Pos: 1},
		{Gid: "g2", Uid: "alice", Op: schema.OpJoin, Pos: 2},
		{Gid: "g2", Uid: "bob", Op: schema.OpJoin, Pos: 2},
		{Gid: "g1", Uid: "alice", Op: schema.OpLeave, Pos: 3},
		{Gid: "g1", Uid: "alice", Op: schema.OpLeave, Pos: 4}, // a second leave changes nothing
		{Gid: "g3", Uid: "alice", Op: schema.OpJoin, Pos: 5},
	}
	if err := r.ApplyMembers(ctx, evs); err != nil {
		t.Fatal(err)
	}
	count(2, 1, 0)
	if err := r.ApplyMembers(ctx, evs[2:]); err != nil { // a replay
		t.Fatal(err)
	}
	count(2, 1, 0)
	if err := r.ApplyMembers(ctx, []schema.Member{{Gid: "g1", Uid: "alice", Op: schema.OpJoin, Pos: 6}}); err != nil {
		t.Fatal(err)
	}
	count(3, 1, 0)
	if g, err := r.UserGroups(ctx, "alice"); err != nil || len(g) != 3 {
		t.Fatalf("alice's groups read back: %v %v; want g1, g2, g3 and no count among them", g, err)
	}

	// An index of an older release: no count.
	if err := c.HDel(ctx, userGroupsKey("alice"), joinedField).Err(); err != nil {
		t.Fatal(err)
	}
	count(3, 1, 0)
	if err := r.ApplyMembers(ctx, []schema.Member{{Gid: "g2", Uid: "alice", Op: schema.OpLeave, Pos: 7}}); err != nil {
		t.Fatal(err)
	}
	count(2, 1, 0)
}

// testReserveGroups: an add's reservations among a user's groups count
// with the groups joined until the projector applies the joins, an add
// that would put one user past the limit reserves for none, and a
// reservation dropped or expired frees its place.
func testReserveGroups(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	if err := r.ApplyMembers(ctx, []schema.Member{{Gid: "g1", Uid: "alice", Op: schema.OpJoin, Pos: 1}}); err != nil {
		t.Fatal(err)
	}
	reserve := func(gid string, hold time.Duration, uids ...string) ([]string, []string) {
		t.Helper()
		held, full, err := r.ReserveGroups(ctx, gid, uids, 2, hold)
		if err != nil {
			t.Fatal(err)
		}
		return held, full
	}
	if held, full := reserve("g2", time.Minute, "alice", "bob"); !slices.Equal(held, []string{"alice", "bob"}) || full != nil {
		t.Fatalf("g2 for alice (in g1) and bob: held %v, full %v", held, full)
	}
	if held, full := reserve("g2", time.Minute, "alice"); held != nil || full != nil {
		t.Fatalf("g2 again for alice: held %v, full %v; want nothing new, no refusal", held, full)
	}
	if held, full := reserve("g3", time.Minute, "bob", "alice"); held != nil || !slices.Equal(full, []string{"alice"}) {
		t.Fatalf("g3 for bob and alice (g1 and g2 being added): held %v, full %v; want alice full, none held", held, full)
	}
	if held, _ := reserve("g4", time.Minute, "bob"); !slices.Equal(held, []string{"bob"}) {
		t.Fatalf("g4 for bob (g2 being added), the refused add dropped his g3: held %v", held)
	}
	// Projected, alice's join of g2 takes the place of its reservation.
	if err := r.ApplyMembers(ctx, []schema.Member{{Gid: "g2", Uid: "alice", Op: schema.OpJoin, Pos: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, full := reserve("g3", time.Minute, "alice"); full == nil {
		t.Fatalf("g3 for alice in g1 and g2: not refused")
	}
	if err := r.ApplyMembers(ctx, []schema.Member{{Gid: "g2", Uid: "alice", Op: schema.OpLeave, Pos: 3}}); err != nil {
		t.Fatal(err)
	}
	if held, _ := reserve("g3", 50*time.Millisecond, "alice"); !slices.Equal(held, []string{"alice"}) {
		t.Fatalf("g3 for alice after she left g2: held %v", held)
	}
	if _, full := reserve("g4", time.Minute, "alice"); full == nil {
		t.Fatalf("g4 for alice in g1, g3 being added: not refused")
	}
	time.Sleep(100 * time.Millisecond) // the join to g3 was never written
	if held, _ := reserve("g4", time.Minute, "alice"); !slices.Equal(held, []string{"alice"}) {
		t.Fatalf("g4 for alice, her reservation of g3 expired: held %v", held)
	}
	if err := r.ClearGroups(ctx, "g4", "alice"); err != nil {
		t.Fatal(err)
	}
	if held, _ := reserve("g5", time.Minute, "alice"); !slices.Equal(held, []string{"alice"}) {
		t.Fatalf("g5 for alice, her reservation of g4 dropped: held %v", held)
	}
}

// testHeldJoinsKeepTheirGroupPlaces: joins written longer than the hold
// keep their users' places among their groups as they keep their places
// in the group (HoldJoins): lost, an add of the user meanwhile passes the
// user's limit.
func testHeldJoinsKeepTheirGroupPlaces(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	const hold = 300 * time.Millisecond
	if held, full, err := r.ReserveGroups(ctx, "g1", []string{"alice"}, 1, hold); err != nil || len(held) != 1 || full != nil {
		t.Fatalf("g1 for alice: held %v, full %v, %v", held, full, err)
	}
	stop := r.HoldJoins(ctx, "g1", []string{"alice"}, hold, func(err error) { t.Error(err) })
	defer stop()
	time.Sleep(3 * hold)
	if held, full, err := r.ReserveGroups(ctx, "g2", []string{"alice"}, 1, hold); err != nil || held != nil || len(full) != 1 {
		t.Fatalf("g2 for alice, her join of g1 written for three holds: held %v, full %v, %v; want her at the limit of 1", held, full, err)
	}
}
