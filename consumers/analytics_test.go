package consumers

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// cookbookSQL returns the named query of docs/analytics.md with its
// {name:Type} placeholders replaced by literals, as the doc tells an
// analyst on 18.16 to do.
func cookbookSQL(t *testing.T, name string, params map[string]string) string {
	t.Helper()
	text, err := os.ReadFile("../docs/analytics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(text), -1) {
		if !strings.HasPrefix(m[1], "-- name: "+name+"\n") {
			continue
		}
		return regexp.MustCompile(`\{([a-z_]+):[^}]*\}`).ReplaceAllStringFunc(m[1], func(ph string) string {
			k := ph[1:strings.Index(ph, ":")]
			v, ok := params[k]
			if !ok {
				t.Fatalf("%s: no value for %s", name, ph)
			}
			return v
		})
	}
	t.Fatalf("no query %s in the cookbook", name)
	return ""
}

func utcLiteral(tm time.Time) string {
	return fmt.Sprintf("toDateTime('%s', 'UTC')", tm.UTC().Format(time.DateTime))
}

// Two devices of u1 read out of order (50, then 40), on a day two days ago
// that the projectors only now catch up with; u2 reads once. Users sent 3
// receipts and 3 acks, all on that day. The projectors append a correction
// of each cursor (upto 50, at now), an event of its own in receipt_events
// and ack_events: daily_readers counted 4 receipts and showed u1 as a
// reader on a day he sent nothing, and event_volume counted the
// corrections as acks and receipts. The queries count each upto once.
func TestTheCookbookCountsNoCorrections(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	sentAt := time.Now().UTC().Add(-48 * time.Hour).Truncate(time.Hour).Add(30 * time.Minute)
	day := sentAt.Format(time.DateOnly)
	gid := "team.ops-2024:eu@x_" + strings.Repeat("g", 40) // allowed punctuation, long
	if err := schema.ValidID(gid); err != nil {
		t.Fatal(err)
	}
	for i, r := range []struct {
		uid  string
		upto int64
	}{{"u1", 50}, {"u1", 40}, {"u2", 30}} {
		at := sentAt.UnixMilli() + int64(i)*1000
		if err := p.prod.SendReceipts(ctx, schema.Receipt{Gid: gid, Uid: r.uid, Upto: r.upto, At: at}); err != nil {
			t.Fatal(err)
		}
		if err := p.prod.SendAcks(ctx, schema.Ack{Gid: gid, Uid: r.uid, Upto: r.upto, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	stopR := p.receiptProjector(t, 0)
	_, stopA := p.ackProjector(t)
	waitFor(t, "the receipts and acks handled", 30*time.Second, func() bool {
		return p.saved(t, GroupReceiptProjector, topics.Receipts) >= 4 && p.saved(t, GroupAckProjector, topics.Acks) >= 4
	})
	stopR()
	stopA()
	t.Logf("chat.receipts holds %d records, chat.acks %d, for 3 receipts and 3 acks sent",
		p.topicEnd(t, topics.Receipts), p.topicEnd(t, topics.Acks))

	from, to := time.Now().UTC().Add(-5*24*time.Hour).Truncate(24*time.Hour), time.Now().UTC().Add(48*time.Hour).Truncate(24*time.Hour)
	query := func(name string) [][]string {
		sql := cookbookSQL(t, name, map[string]string{"from": utcLiteral(from), "to": utcLiteral(to)})
		rows, err := p.ch.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer rows.Close()
		var out [][]string
		for rows.Next() {
			types := rows.ColumnTypes()
			ptrs := make([]any, len(types))
			for i, ct := range types {
				ptrs[i] = reflect.New(ct.ScanType()).Interface()
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			row := make([]string, len(ptrs))
			for i, p := range ptrs {
				v := reflect.ValueOf(p).Elem().Interface()
				if tm, ok := v.(time.Time); ok {
					v = tm.Format(time.DateOnly)
				}
				row[i] = fmt.Sprint(v)
			}
			out = append(out, row)
		}
		return out
	}
	// Columns of daily_readers: gid, day, readers, receipts.
	got := fmt.Sprint(query("daily_readers"))
	want := fmt.Sprint([][]string{{gid, day, "2", "3"}})
	if got != want {
		t.Errorf("daily_readers: users sent 3 receipts, all on %s\n got %s\nwant %s", day, got, want)
	}
	// Columns of event_volume: gid, day, messages, acks, receipts, ratios.
	got = fmt.Sprint(query("event_volume"))
	want = fmt.Sprint([][]string{{gid, day, "0", "3", "3", "+Inf", "+Inf"}})
	if got != want {
		t.Errorf("event_volume: users sent 3 acks and 3 receipts, all on %s\n got %s\nwant %s", day, got, want)
	}
}

// The receipt projector handles u1's 50 then 40 (two devices) and appends
// the correction, then crashes before its position is saved (modelled by
// saving the position it had before the batch, as the restarted process
// finds it). The replay, batch by batch, finds 40 behind the cursor again
// and appends a second correction: receipt_events holds 4 events for u1's
// 2 receipts, and daily_readers counted 4. It counts 2.
func TestTheCookbookCountsNoCorrectionAppendedAgainByACrashReplay(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	at := time.Now().UnixMilli()
	for _, upto := range []int64{50, 40} {
		if err := p.prod.SendReceipts(ctx, schema.Receipt{Gid: "g1", Uid: "u1", Upto: upto, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	run := func() func() { return p.receiptProjector(t, 1) }
	saved := func() int64 { return p.saved(t, GroupReceiptProjector, topics.Receipts) }
	stop := run()
	waitFor(t, "the correction handled", 20*time.Second, func() bool { return saved() == 3 })
	stop()
	// The crash: the effects are durable, the commit of the last batches is not.
	if err := p.redis.SaveOffsets(ctx, GroupReceiptProjector, topics.Receipts, map[int]int64{0: 1}); err != nil {
		t.Fatal(err)
	}
	stop = run()
	waitFor(t, "the replay at the log's end", 20*time.Second, func() bool { return saved() >= 3 })
	time.Sleep(2 * time.Second)
	stop()
	t.Logf("after a crash replay of u1's 2 receipts, chat.receipts holds %d records", p.topicEnd(t, topics.Receipts))
	sql := cookbookSQL(t, "daily_readers", map[string]string{
		"from": utcLiteral(time.Now().Add(-24 * time.Hour)), "to": utcLiteral(time.Now().Add(24 * time.Hour))})
	rows, err := p.ch.Query(ctx, "SELECT toUInt64(sum(receipts)) FROM ("+sql+")")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var n uint64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	if n != 2 {
		t.Errorf("daily_readers counts %d receipts; u1 sent 2", n)
	}
}
