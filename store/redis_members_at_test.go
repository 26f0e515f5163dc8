package store

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// testMembershipReplayAt applies random member events with their offsets,
// then replays them from a random offset in random batches, as the member
// projector does after a crash between effect and commit: after every
// batch of the replay each membership must read as it did before the
// replay began, never as it stood earlier. A wipe of the projection then
// lets the same events be applied again from the start.
func testMembershipReplayAt(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	const groups, users = 2, 3
	members := func() map[string]map[string]Membership {
		out := map[string]map[string]Membership{}
		for g := range groups {
			gid := fmt.Sprint("g", g)
			got, err := r.Members(ctx, gid)
			if err != nil {
				t.Fatal(err)
			}
			out[gid] = got
		}
		return out
	}
	same := func(a, b map[string]map[string]Membership) bool {
		return maps.EqualFunc(a, b, func(x, y map[string]Membership) bool { return maps.Equal(x, y) })
	}
	applyIn := func(ms []schema.Member, offs []int64, after func()) {
		for len(ms) > 0 {
			n := min(len(ms), 1+rng.IntN(4))
			if err := r.ApplyMembersAt(ctx, ms[:n], offs[:n], math.MinInt64); err != nil {
				t.Fatal(err)
			}
			ms, offs = ms[n:], offs[n:]
			after()
		}
	}
	for round := range 20 {
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var ms []schema.Member
		var offs []int64
		pos := int64(-1)
		for i := range 10 + rng.IntN(30) {
			pos += rng.Int64N(3)
			e := join(fmt.Sprint("g", rng.IntN(groups)), fmt.Sprint("u", rng.IntN(users)), pos)
			if rng.IntN(2) == 0 {
				e = leaveJoined(e.Gid, e.Uid, pos, rng.Int64N(pos+2)-1)
			}
			ms, offs = append(ms, e), append(offs, int64(100+i))
		}
		applyIn(ms, offs, func() {})
		want := members()
		from := rng.IntN(len(ms))
		applyIn(ms[from:], offs[from:], func() {
			if got := members(); !same(got, want) {
				t.Fatalf("round %d: replaying from offset %d, the memberships read %v, before the replay %v", round, offs[from], got, want)
			}
		})
		if _, err := r.Wipe(ctx, ProjectionMembers, "chat.member-projector"); err != nil {
			t.Fatal(err)
		}
		applyIn(ms, offs, func() {})
		if got := members(); !same(got, want) {
			t.Fatalf("round %d: rebuilt after a wipe: %v, want %v", round, got, want)
		}
	}
}
