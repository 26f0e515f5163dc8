package store

import (
	"context"
	"strconv"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// BenchmarkReadCountsPage50 computes the read counts of a page of 50
// messages the way the gateway answers read_counts: the messages from the
// window (for their senders), the group's read state, then a count per
// message. Groups of 50 and 500 members, every member with a read cursor
// somewhere in the page, against a real redis-server.
func BenchmarkReadCountsPage50(b *testing.B) {
	for _, size := range []int{50, 500} {
		b.Run(strconv.Itoa(size)+"members", func(b *testing.B) {
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
			cpu0 := redisCPU(b, c)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				byID, err := r.WindowMessages(ctx, gid, page)
				if err != nil {
					b.Fatal(err)
				}
				st, err := r.ReadState(ctx, gid)
				if err != nil {
					b.Fatal(err)
				}
				for _, id := range page {
					m, ok := byID[id]
					if !ok {
						b.Fatalf("message %d not in the window", id)
					}
					read, audience := st.Count(id, m.Sender)
					if audience != size-1 || read < 0 || read > audience {
						b.Fatalf("message %d: read %d of %d, want an audience of %d", id, read, audience, size-1)
					}
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/page")
			reportRedis(b, c, cpu0, b.N, "pages")
		})
	}
}
