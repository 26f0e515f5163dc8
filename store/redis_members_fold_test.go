package store

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// testMembershipFold applies random event sequences with ApplyMembers, in
// random batches, and with Membership.Apply in Go: the memberships must be
// the same, group by group and user by user.
func testMembershipFold(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	const groups, users = 3, 4
	for round := range 30 {
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		want := map[string]map[string]Membership{}
		var ms []schema.Member
		pos := int64(-1)
		for range 10 + rng.IntN(60) {
			switch rng.IntN(10) {
			case 0: // a position out of order: the fold must not care
				pos = rng.Int64N(pos+2) - 1
			default:
				pos += rng.Int64N(3) // repeats when no message came between
			}
			e := join(fmt.Sprint("g", rng.IntN(groups)), fmt.Sprint("u", rng.IntN(users)), pos)
			switch rng.IntN(5) {
			case 0:
				e.Op = schema.OpLeave
			case 1:
				e = leaveJoined(e.Gid, e.Uid, pos, rng.Int64N(pos+2)-1)
			case 2:
				e = leaveJoined(e.Gid, e.Uid, pos, rng.Int64N(pos+2)-1)
				e.Op = schema.OpLeaving
			}
			ms = append(ms, e)
			if want[e.Gid] == nil {
				want[e.Gid] = map[string]Membership{}
			}
			want[e.Gid][e.Uid] = want[e.Gid][e.Uid].Apply(e)
		}
		for rest := ms; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(10))
			applyMembers(t, r, rest[:n]...)
			rest = rest[n:]
		}
		for g := range groups {
			gid := fmt.Sprint("g", g)
			got, err := r.Members(ctx, gid)
			if err != nil {
				t.Fatal(err)
			}
			if w := want[gid]; !maps.Equal(got, w) {
				t.Fatalf("round %d: %s: Redis folded %v, Apply folded %v\nevents %+v", round, gid, got, w, ms)
			}
		}
		for u := range users {
			uid := fmt.Sprint("u", u)
			got, err := r.UserGroups(ctx, uid)
			if err != nil {
				t.Fatal(err)
			}
			w := map[string]Membership{}
			for gid, m := range want {
				if v, ok := m[uid]; ok {
					w[gid] = v
				}
			}
			if !maps.Equal(got, w) {
				t.Fatalf("round %d: groups of %s: Redis %v, Apply %v", round, uid, got, w)
			}
		}
	}
}

func TestMembershipApply(t *testing.T) {
	joined := func(at int64) Membership { return Membership{State: MemberJoined, JoinedAt: at} }
	left := func(at, until int64) Membership { return Membership{State: MemberLeft, JoinedAt: at, LeftAt: until} }
	for _, tc := range []struct {
		name string
		from Membership
		ev   schema.Member
		want Membership
	}{
		{"join", Membership{}, join("g", "u", 5), joined(5)},
		{"join while joined moves the join", joined(5), join("g", "u", 9), joined(9)},
		{"leave", joined(5), leave("g", "u", 9), left(5, 9)},
		{"leave while left", left(5, 9), leave("g", "u", 12), left(5, 9)},
		{"leave without a join", Membership{}, leave("g", "u", 7), left(7, 7)},
		{"leave naming its join, without a known join", Membership{}, leaveJoined("g", "u", 7, 3), left(3, 7)},
		{"leave naming its join, joined", joined(5), leaveJoined("g", "u", 9, 2), left(5, 9)},
		{"leave naming its join, left", left(5, 9), leaveJoined("g", "u", 12, 10), left(5, 9)},
		{"rejoin", left(5, 9), join("g", "u", 12), joined(12)},
		{"leaving changes nothing", joined(5), schema.Member{Op: schema.OpLeaving, Pos: 12, HasJoined: true, Joined: 5}, joined(5)},
		{"leaving while left", left(5, 9), schema.Member{Op: schema.OpLeaving, Pos: 12, HasJoined: true, Joined: 5}, left(5, 9)},
		{"leaving of a member not known names their join", Membership{}, schema.Member{Op: schema.OpLeaving, Pos: 12, HasJoined: true, Joined: 3}, joined(3)},
		{"unknown op", joined(5), schema.Member{Op: 9, Pos: 12}, joined(5)},
	} {
		if got := tc.from.Apply(tc.ev); got != tc.want {
			t.Errorf("%s: %+v.Apply(%v at %d) = %+v, want %+v", tc.name, tc.from, tc.ev.Op, tc.ev.Pos, got, tc.want)
		}
	}
}
