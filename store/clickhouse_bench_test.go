package store

import (
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
