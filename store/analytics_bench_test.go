package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// BenchmarkReadCountsOfALargeGroup runs the cookbook's read_counts over
// ranges of a group of 10,000 members, each of whom read up to a point of
// 1,000 messages ten times on the way (100,000 receipts): the cost an
// analyst meets on the largest groups.
func BenchmarkReadCountsOfALargeGroup(b *testing.B) {
	const members, msgs = 10000, 1000
	c := testClickHouse(b)
	ctx := context.Background()
	var rows []MemberRow
	for i := range members {
		rows = append(rows, MemberRow{Member: schema.Member{Gid: "big", Uid: fmt.Sprintf("u%05d", i), Op: schema.OpJoin, Pos: -1, At: 1}, Offset: int64(i)})
	}
	if err := c.InsertMembers(ctx, rows); err != nil {
		b.Fatal(err)
	}
	var ms []schema.Message
	for id := range int64(msgs) {
		ms = append(ms, schema.Message{Gid: "big", MsgID: id, Sender: "u00000", SentAt: 1000 + id, Body: []byte("x")})
	}
	if err := c.InsertMessages(ctx, 0, ms); err != nil {
		b.Fatal(err)
	}
	var rs []ReceiptRow
	for i := range members {
		last := int64(i*7919) % msgs // how far member i read
		for k := int64(1); k <= 10; k++ {
			rs = append(rs, ReceiptRow{Receipt: schema.Receipt{Gid: "big", Uid: fmt.Sprintf("u%05d", i), Upto: last * k / 10, At: 2000 + k}, Offset: int64(len(rs))})
		}
	}
	if err := c.InsertReceipts(ctx, rs); err != nil {
		b.Fatal(err)
	}
	q := loadCookbook(b)["read_counts"]
	for _, n := range []int64{100, 1000} {
		b.Run(fmt.Sprintf("%d messages", n), func(b *testing.B) {
			for b.Loop() {
				if got := q.run(b, c, map[string]any{"gid": "big", "from_msgid": int64(0), "to_msgid": n - 1}); int64(len(got)) != n {
					b.Fatalf("%d rows; want %d", len(got), n)
				}
			}
		})
	}
}
