package store

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// seedMemberOf makes uid a member of n groups of msgs messages each, read
// up to the second newest (one unread), and returns the gids.
func seedMemberOf(tb testing.TB, r *Redis, uid string, n, msgs int) []string {
	tb.Helper()
	ctx := context.Background()
	gids := make([]string, n)
	const chunk = 1000
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		var joins []schema.Member
		var window []schema.Message
		var reads []schema.Receipt
		for i := lo; i < hi; i++ {
			gids[i] = "team-" + strconv.Itoa(i)
			joins = append(joins, schema.Member{Gid: gids[i], Uid: uid, Op: schema.OpJoin, Pos: -1})
			window = append(window, batchOf(gids[i], span(0, int64(msgs-1))...)...)
			reads = append(reads, schema.Receipt{Gid: gids[i], Uid: uid, Upto: int64(msgs - 2)})
		}
		if err := r.ApplyMembers(ctx, joins); err != nil {
			tb.Fatal(err)
		}
		appendAll(tb, r, window...)
		if err := r.AdvanceReads(ctx, reads); err != nil {
			tb.Fatal(err)
		}
	}
	return gids
}

// BenchmarkRedisSyncManyGroups is a login's sync of a user in 1,000,
// 5,000 and 20,000 groups: the user's group index, then the cursors of
// every group. It reports the Redis CPU per sync and per group, which a
// login storm multiplies.
func BenchmarkRedisSyncManyGroups(b *testing.B) {
	for _, n := range []int{1000, 5000, 20000} {
		b.Run(fmt.Sprint("groups=", n), func(b *testing.B) {
			r, c := benchRedisServer(b, RedisConfig{})
			ctx := context.Background()
			seedMemberOf(b, r, "u", n, 10)
			cpu0 := redisCPU(b, c)
			b.ReportAllocs()
			for b.Loop() {
				groups, err := r.UserGroups(ctx, "u")
				if err != nil || len(groups) != n {
					b.Fatal(len(groups), err)
				}
				gids := make([]string, 0, len(groups))
				for gid := range groups {
					gids = append(gids, gid)
				}
				cur, err := r.MemberCursors(ctx, "u", gids)
				if err != nil || cur["team-1"].Unread != 1 {
					b.Fatal(cur["team-1"], err)
				}
			}
			cpu := float64((redisCPU(b, c) - cpu0).Nanoseconds()) / float64(b.N)
			b.ReportMetric(cpu, "redis-ns/sync")
			b.ReportMetric(cpu/float64(n), "redis-ns/group")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/group")
		})
	}
}
