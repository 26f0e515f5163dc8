package store

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// BenchmarkClickHouseInsertShaped inserts what the persister inserts during
// a replay of 16 partitions: batches of 200-byte messages, from several
// goroutines at once (one per partition being replayed), 1,000 groups.
// It reports rows/s over all goroutines.
func BenchmarkClickHouseInsertShaped(b *testing.B) {
	for _, s := range []struct {
		batch, conc int
		sorted      bool
	}{{10_000, 1, false}, {10_000, 16, false}, {50_000, 4, false}, {100_000, 1, false}, {100_000, 1, true}, {50_000, 4, true}} {
		name := fmt.Sprintf("batch%d/conc%d", s.batch, s.conc)
		if s.sorted {
			name += "/sorted"
		}
		b.Run(name, func(b *testing.B) {
			c := testClickHouse(b)
			ctx := context.Background()
			body := make([]byte, 200)
			for i := range body {
				body[i] = 'a' + byte(i%26)
			}
			batches := make([][]schema.Message, s.conc)
			for w := range batches {
				batches[w] = make([]schema.Message, s.batch)
				for i := range batches[w] {
					batches[w][i] = schema.Message{Gid: "group-" + strconv.Itoa(i%1000), Sender: "u" + strconv.Itoa(i%100),
						ClientMsgID: "c" + strconv.Itoa(i), SentAt: 1_767_225_600_000 + int64(i), Body: body}
				}
				if s.sorted { // in (gid, msgid) order, as the table sorts them
					slices.SortStableFunc(batches[w], func(x, y schema.Message) int { return strings.Compare(x.Gid, y.Gid) })
				}
			}
			var next atomic.Int64
			for b.Loop() {
				var wg sync.WaitGroup
				errs := make([]error, s.conc)
				for w := range s.conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						msgs := batches[w]
						first := next.Add(int64(len(msgs))) - int64(len(msgs))
						for i := range msgs {
							msgs[i].MsgID = first + int64(i)
						}
						errs[w] = c.InsertMessages(ctx, int32(w), msgs)
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(next.Load())/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkClickHousePullDeep reads pages of 1,000 messages of a group that
// stores 200,000 (200-byte bodies), across the whole history and across
// its last 3,000: a page should cost the same, however much history
// its range spans.
func BenchmarkClickHousePullDeep(b *testing.B) {
	const total, batch, page = 200_000, 50_000, 1_000
	c := testClickHouse(b)
	ctx := b.Context()
	body := bytes.Repeat([]byte("x"), 200)
	msgs := make([]schema.Message, batch)
	for first := 0; first < total; first += batch {
		for i := range msgs {
			id := int64(first + i)
			msgs[i] = schema.Message{Gid: "g", Sender: "u" + strconv.Itoa(i%100), ClientMsgID: "c" + strconv.FormatInt(id, 10),
				SentAt: 1_767_225_600_000 + id, Body: body, MsgID: id}
		}
		if err := c.InsertMessages(ctx, 0, msgs); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.conn.Exec(ctx, "OPTIMIZE TABLE messages FINAL"); err != nil { // one part, as a merged table reads
		b.Fatal(err)
	}
	for _, s := range []struct {
		name          string
		before        bool
		after, bound  int64
		first, length int64 // the page read
	}{
		{"Messages/span200k", false, -1, total - 1, 0, page},
		{"Messages/span3k", false, total - 3_001, total - 1, total - 3_000, page},
		{"MessagesBefore/span200k", true, -1, total - page, total - 2*page, page},
		{"MessagesBefore/span3k", true, total - 3_001, total - page, total - 2*page, page},
	} {
		b.Run(s.name, func(b *testing.B) {
			for b.Loop() {
				var got []schema.Message
				var err error
				if s.before {
					got, err = c.MessagesBefore(ctx, "g", s.after, s.bound, page)
				} else {
					got, err = c.Messages(ctx, "g", s.after, s.bound, page)
				}
				if err != nil {
					b.Fatal(err)
				}
				if int64(len(got)) != s.length || got[0].MsgID != s.first {
					b.Fatalf("msgids %v, want %d from %d", msgids(got), s.length, s.first)
				}
			}
		})
	}
}
