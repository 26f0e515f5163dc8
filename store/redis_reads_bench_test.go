package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// BenchmarkReadCountsPage50 computes the read counts of a page of 50
// messages the way the gateway answers read_counts: the messages' senders
// from the window, the group's read state, then a count per message.
// Groups of 50 and 500 members, every member with a read cursor somewhere
// in the page, and bodies of 20 bytes or 16 KiB, against a real
// redis-server; redis-B/page is what Redis sends for a page.
func BenchmarkReadCountsPage50(b *testing.B) {
	for _, tc := range []struct{ members, body int }{{50, 0}, {500, 0}, {50, 16 << 10}} {
		name := strconv.Itoa(tc.members) + "members"
		if tc.body > 0 {
			name += fmt.Sprintf("-%dKiB", tc.body>>10)
		}
		b.Run(name, func(b *testing.B) {
			size := tc.members
			r, c := benchRedisServer(b, RedisConfig{})
			ctx := context.Background()
			const gid = "g-reads"
			uid := func(i int) string { return "u" + strconv.Itoa(i) }
			members := make([]schema.Member, size)
			for i := range members {
				members[i] = schema.Member{Gid: gid, Uid: uid(i), Op: schema.OpJoin, Pos: -1, At: t0}
			}
			if err := r.ApplyMembers(ctx, members); err != nil {
				b.Fatal(err)
			}
			msgs := make([]schema.Message, 1000)
			for i := range msgs {
				msgs[i] = msg(gid, uid(i%size), "c"+strconv.Itoa(i), int64(i), t0)
				if tc.body > 0 {
					msgs[i].Body = []byte(strings.Repeat("x", tc.body))
				}
			}
			if err := r.AppendWindow(ctx, nil, msgs); err != nil {
				b.Fatal(err)
			}
			// The page is msgids 950..999; member i has read up to 940+i%60.
			reads := make([]schema.Receipt, size)
			for i := range reads {
				reads[i] = schema.Receipt{Gid: gid, Uid: uid(i), Upto: int64(940 + i%60), At: t0}
			}
			if err := r.AdvanceReads(ctx, reads); err != nil {
				b.Fatal(err)
			}
			page := make([]int64, 50)
			for i := range page {
				page[i] = int64(950 + i)
			}
			cpu0, out0 := redisCPU(b, c), redisSent(b, c)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				senders, err := r.WindowSenders(ctx, gid, page)
				if err != nil {
					b.Fatal(err)
				}
				st, err := r.ReadState(ctx, gid)
				if err != nil {
					b.Fatal(err)
				}
				for _, id := range page {
					sender, ok := senders[id]
					if !ok {
						b.Fatalf("message %d not in the window", id)
					}
					read, audience := st.Count(id, sender)
					if audience != size-1 || read < 0 || read > audience {
						b.Fatalf("message %d: read %d of %d, want an audience of %d", id, read, audience, size-1)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/page")
			b.ReportMetric(float64(redisSent(b, c)-out0)/float64(b.N), "redis-B/page")
			reportRedis(b, c, cpu0, b.N, "pages")
		})
	}
}

// redisSent is how many bytes the server behind c has sent its clients.
func redisSent(tb testing.TB, c redis.UniversalClient) int64 {
	tb.Helper()
	v, err := testserver.RedisInfo(context.Background(), c, "stats", "total_net_output_bytes")
	n, perr := strconv.ParseInt(v, 10, 64)
	if err != nil || perr != nil {
		tb.Fatalf("INFO stats total_net_output_bytes = %q, %v", v, err)
	}
	return n
}
