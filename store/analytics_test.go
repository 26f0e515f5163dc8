package store

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// cookbookPath is the analysts' cookbook whose every query the tests run.
const cookbookPath = "../docs/analytics.md"

// cookbookQuery is one named ```sql block of the cookbook.
type cookbookQuery struct {
	name string
	sql  string
}

var (
	sqlBlockRE    = regexp.MustCompile("(?s)```sql\n(.*?)```")
	queryNameRE   = regexp.MustCompile(`^-- name: ([a-z0-9_]+)\n`)
	placeholderRE = regexp.MustCompile(`\{([a-z_][a-z0-9_]*):([A-Za-z0-9]+(?:\('UTC'\))?)\}`)
)

// loadCookbook returns every sql block of the cookbook, by name. A block
// without a name comment, a name used twice, or a parameter that the
// block's section does not name in backquotes fails the test.
func loadCookbook(t testing.TB) map[string]cookbookQuery {
	t.Helper()
	text, err := os.ReadFile(cookbookPath)
	if err != nil {
		t.Fatalf("read the cookbook: %v", err)
	}
	queries := make(map[string]cookbookQuery)
	for _, section := range strings.Split(string(text), "\n## ") {
		for _, m := range sqlBlockRE.FindAllStringSubmatchIndex(section, -1) {
			sql := section[m[2]:m[3]]
			name := queryNameRE.FindStringSubmatch(sql)
			if name == nil {
				t.Fatalf("%s: an sql block does not start with \"-- name: <name>\":\n%s", cookbookPath, sql)
			}
			if _, dup := queries[name[1]]; dup {
				t.Fatalf("%s: two queries named %s", cookbookPath, name[1])
			}
			for _, ph := range placeholderRE.FindAllStringSubmatch(sql, -1) {
				if !strings.Contains(section[:m[0]], "`"+ph[1]+"`") {
					t.Errorf("%s: %s: the text before the query does not name its parameter `%s`", cookbookPath, name[1], ph[1])
				}
			}
			queries[name[1]] = cookbookQuery{name: name[1], sql: sql}
		}
	}
	return queries
}

// bind replaces each {name:Type} placeholder with "?" and returns the
// arguments in order, as an analyst on 18.16 replaces them with literals:
// a DateTime('UTC') value, a time.Time, becomes toDateTime('<UTC text>',
// 'UTC').
func (q cookbookQuery) bind(params map[string]any) (string, []any, error) {
	var args []any
	var bad error
	used := make(map[string]bool)
	sql := placeholderRE.ReplaceAllStringFunc(q.sql, func(ph string) string {
		m := placeholderRE.FindStringSubmatch(ph)
		name, typ := m[1], m[2]
		v, ok := params[name]
		used[name] = true
		switch {
		case !ok:
			bad = fmt.Errorf("%s: no value for {%s:%s}", q.name, name, typ)
		case typ == "String":
			_, ok = v.(string)
		case typ == "UInt64":
			var i int64
			i, ok = v.(int64)
			ok = ok && i >= 0
		case typ == "DateTime('UTC')":
			var tm time.Time
			if tm, ok = v.(time.Time); ok {
				v = tm.UTC().Format(time.DateTime)
			}
		default:
			ok = false
		}
		if !ok && bad == nil {
			bad = fmt.Errorf("%s: {%s:%s} given %T %v", q.name, name, typ, v, v)
		}
		args = append(args, v)
		if typ == "DateTime('UTC')" {
			return "toDateTime(?, 'UTC')"
		}
		return "?"
	})
	for name := range params {
		if !used[name] && bad == nil {
			bad = fmt.Errorf("%s: parameter %s is not in the query", q.name, name)
		}
	}
	return sql, args, bad
}

// run binds params, runs the query and returns its rows, each value
// normalized: integers to int64, floats to float64, Date to "2006-01-02".
func (q cookbookQuery) run(t testing.TB, c *ClickHouse, params map[string]any) [][]any {
	t.Helper()
	sql, args, err := q.bind(params)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", q.name, params, err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	var out [][]any
	for rows.Next() {
		ptrs := make([]any, len(types))
		for i, ct := range types {
			ptrs[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatalf("%s: scan: %v", q.name, err)
		}
		row := make([]any, len(ptrs))
		for i, p := range ptrs {
			row[i] = normalize(reflect.ValueOf(p).Elem().Interface())
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", q.name, err)
	}
	return out
}

func normalize(v any) any {
	switch x := reflect.ValueOf(v); x.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return x.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(x.Uint())
	case reflect.Float32, reflect.Float64:
		return x.Float()
	}
	if tm, ok := v.(time.Time); ok {
		return tm.UTC().Format(time.DateOnly)
	}
	return v
}

// sameRows compares by printed value, so that NaN equals NaN and a float
// must match to the last bit.
func sameRows(got, want [][]any) bool {
	return fmt.Sprint(got) == fmt.Sprint(want)
}

// TestAnalyticsCookbook writes five simulated days of chat, with replayed
// records, to ClickHouse and Redis, and runs every query of
// docs/analytics.md against clickhouse-server: each answer must equal the
// one computed in Go from the records, and the read counts must agree
// with the Redis projection wherever a member's current membership tells
// their membership at send time.
func TestAnalyticsCookbook(t *testing.T) {
	const seed = 20240130
	c := testClickHouse(t)
	r := newTestRedis(t, newServerClient(t, testserver.NewRedis(t)), RedisConfig{WindowSize: -1})
	ctx := t.Context()
	stopMerges(t, c, "messages", "member_events", "ack_events", "ack_cursors", "receipt_events", "read_cursors")
	d := newAnalyticsData(seed)
	d.write(t, c, r, seed)
	tr := d.truth()

	// The data set has what the queries must cope with.
	distinct := map[string]int{"messages": len(d.msgs[0]) + len(d.msgs[1]),
		"member_events": len(d.members), "ack_events": len(d.acks), "receipt_events": len(d.receipts)}
	for table, n := range distinct {
		var raw uint64
		if err := c.conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if raw <= uint64(n) {
			t.Fatalf("%s holds %d rows for %d records: no replayed copies to be exact about", table, raw, n)
		}
		t.Logf("%s: %d records, %d rows", table, n, raw)
	}
	var rejoins int
	for _, users := range tr.events {
		for _, evs := range users {
			for i := 1; i < len(evs); i++ {
				if evs[i].Op == schema.OpJoin && evs[i-1].Op == schema.OpLeave {
					rejoins++
				}
			}
		}
	}
	if rejoins == 0 {
		t.Fatal("no member left and rejoined")
	}
	if compacted := len(d.history) - len(d.members); compacted == 0 {
		t.Fatal("no former member is known by their leave alone")
	} else {
		t.Logf("%d member events compacted away", compacted)
	}
	byKey := func(rows []MemberRow) map[[2]string][]MemberRow {
		out := map[[2]string][]MemberRow{}
		for _, ev := range rows {
			out[[2]string{ev.Gid, ev.Uid}] = append(out[[2]string{ev.Gid, ev.Uid}], ev)
		}
		return out
	}
	all, kept := byKey(d.history), byKey(d.members)
	var leaveAlone, lastJoinAlone int
	for k, evs := range kept {
		switch {
		case len(evs) == 1 && len(all[k]) > 1 && evs[0].Op == schema.OpLeave:
			leaveAlone++
		case len(evs) == 1 && len(all[k]) > 1 && evs[0].Op == schema.OpJoin:
			lastJoinAlone++
		}
	}
	if leaveAlone == 0 || lastJoinAlone == 0 {
		t.Fatalf("%d former members known by their leave alone, %d rejoined ones by their last join alone; want some of each", leaveAlone, lastJoinAlone)
	}

	checkProjections(t, c, r, tr)

	queries := loadCookbook(t)
	checks := map[string]func(t *testing.T, q cookbookQuery){
		"read_counts": func(t *testing.T, q cookbookQuery) {
			for _, gid := range tr.gids() {
				msgs := tr.msgs[gid]
				ranges := [][2]int64{{0, msgs[len(msgs)-1].MsgID}}
				if len(msgs) > 20 {
					ranges = append(ranges, [2]int64{msgs[5].MsgID, msgs[20].MsgID - 1})
				}
				for _, rg := range ranges {
					got := q.run(t, c, map[string]any{"gid": gid, "from_msgid": rg[0], "to_msgid": rg[1]})
					want := tr.readCounts(gid, rg[0], rg[1])
					if !sameRows(got, want) {
						t.Errorf("%s of %s in %v:\n got %v\nwant %v", q.name, gid, rg, got, want)
					}
				}
			}
		},
		"unread_members": func(t *testing.T, q cookbookQuery) {
			for _, gid := range tr.gids() {
				for i, m := range tr.msgs[gid] {
					if i%2 == 1 && i != len(tr.msgs[gid])-1 {
						continue // half of them is plenty, and twice as fast
					}
					got := q.run(t, c, map[string]any{"gid": gid, "msgid": m.MsgID})
					if want := tr.unread(m); !sameRows(got, want) {
						t.Errorf("%s of %s/%d: got %v, want %v", q.name, gid, m.MsgID, got, want)
					}
				}
			}
		},
		"time_to_read":     windowCheck(c, tr.latencies(tr.receipts)),
		"delivery_latency": windowCheck(c, tr.latencies(tr.acks)),
		"daily_readers":    windowCheck(c, tr.dailyReaders),
		"event_volume":     windowCheck(c, tr.eventVolume),
	}
	for name := range queries {
		if checks[name] == nil {
			t.Errorf("%s: query %s has no check here; add one", cookbookPath, name)
		}
	}
	for name, check := range checks {
		q, ok := queries[name]
		if !ok {
			t.Errorf("%s: no query %s", cookbookPath, name)
			continue
		}
		t.Run(name, func(t *testing.T) { check(t, q) })
	}
}

// windows are the [from, to) ranges the time-bound queries are checked on:
// everything, and a part that cuts through days and the month's end.
var windows = [][2]time.Time{
	{time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)},
	{time.Date(2024, 1, 31, 12, 0, 0, 0, time.UTC), time.Date(2024, 2, 2, 6, 30, 0, 0, time.UTC)},
}

// windowCheck checks a query with parameters from and to against want on
// each of windows.
func windowCheck(c *ClickHouse, want func(from, to time.Time) [][]any) func(t *testing.T, q cookbookQuery) {
	return func(t *testing.T, q cookbookQuery) {
		for _, w := range windows {
			got := q.run(t, c, map[string]any{"from": w[0], "to": w[1]})
			exp := want(w[0], w[1])
			if len(exp) == 0 {
				t.Fatalf("%s in %v: nothing to compare; the data set is too small", q.name, w)
			}
			if !sameRows(got, exp) {
				t.Errorf("%s in [%v, %v):\n got %v\nwant %v", q.name, w[0], w[1], got, exp)
			}
		}
	}
}

// checkProjections compares the Redis projection and ClickHouse's cursors
// with the records, then the live read counts (Redis's ReadState) with
// the records' truth, which the cookbook's queries are held to.
func checkProjections(t *testing.T, c *ClickHouse, r *Redis, tr *analyticsTruth) {
	t.Helper()
	ctx := t.Context()
	var agree, differ int
	for _, gid := range tr.gids() {
		wr, err := r.Window(ctx, gid, -1, 1_000_000, 0)
		window := wr.Messages
		if err != nil || wr.Floor != -1 || len(window) != len(tr.msgs[gid]) {
			t.Fatalf("window of %s: %d messages, floor %d, err %v; want %d, never trimmed", gid, len(window), wr.Floor, err, len(tr.msgs[gid]))
		}
		members, err := r.Members(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		for uid := range tr.events[gid] {
			if m := tr.current(gid, uid); members[uid] != m {
				t.Errorf("Redis membership of %s in %s = %+v, want %+v", uid, gid, members[uid], m)
			}
		}
		for _, cur := range []struct {
			name   string
			log    cursorLog
			ch, rd func(context.Context, string) (map[string]int64, error)
		}{
			{"read", tr.receipts, c.ReadCursors, r.ReadCursors},
			{"ack", tr.acks, c.AckCursors, r.AckCursors},
		} {
			// ClickHouse holds the events' cursors; Redis also raises a
			// joiner's cursors to the join position.
			want, wantRedis := make(map[string]int64), make(map[string]int64)
			for uid := range cur.log[gid] {
				want[uid], _ = cur.log.cursor(gid, uid)
			}
			for uid, evs := range tr.events[gid] {
				joins := make(cursorLog)
				for _, ev := range evs {
					if ev.Op == schema.OpJoin {
						joins.add(gid, uid, ev.Pos, ev.At)
					}
				}
				if c, ok := want[uid]; ok {
					joins.add(gid, uid, c, 0)
				}
				wantRedis[uid], _ = joins.cursor(gid, uid)
			}
			if got, err := cur.ch(ctx, gid); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("ClickHouse %s cursors of %s = %v, %v; want %v", cur.name, gid, got, err, want)
			}
			if got, err := cur.rd(ctx, gid); err != nil || !reflect.DeepEqual(got, wantRedis) {
				t.Errorf("Redis %s cursors of %s = %v, %v; want %v", cur.name, gid, got, err, wantRedis)
			}
		}

		st, err := r.ReadState(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range window {
			if !equalMessage(m, tr.msgs[gid][i]) {
				t.Fatalf("window of %s: message %d = %+v, want %+v", gid, i, m, tr.msgs[gid][i])
			}
			// Redis judges by current membership; the truth by membership
			// at send time. They differ only for a member who left after m
			// and rejoined: such a member is Redis's blind spot.
			blind := make(map[string]bool)
			for uid := range tr.events[gid] {
				if uid != m.Sender && tr.current(gid, uid).Sees(m.MsgID) != tr.memberAt(gid, uid, m.MsgID) {
					blind[uid] = true
				}
			}
			read, unread := st.Who(m.MsgID, m.Sender)
			var wantRead, wantUnread []string
			for _, uid := range tr.audience(m) {
				if tr.hasRead(gid, uid, m.MsgID) {
					wantRead = append(wantRead, uid)
				} else {
					wantUnread = append(wantUnread, uid)
				}
			}
			if len(blind) == 0 {
				agree++
				if !slices.Equal(read, wantRead) || !slices.Equal(unread, wantUnread) {
					t.Errorf("%s/%d: Redis read %v unread %v; want read %v unread %v", gid, m.MsgID, read, unread, wantRead, wantUnread)
				}
				continue
			}
			differ++
			drop := func(uids []string) []string {
				return slices.DeleteFunc(slices.Clone(uids), func(u string) bool { return blind[u] })
			}
			if !slices.Equal(drop(read), drop(wantRead)) || !slices.Equal(drop(unread), drop(wantUnread)) {
				t.Errorf("%s/%d: apart from rejoiners %v, Redis read %v unread %v; want read %v unread %v",
					gid, m.MsgID, blind, read, unread, wantRead, wantUnread)
			}
		}
	}
	if agree == 0 || differ == 0 {
		t.Fatalf("messages where Redis and send-time membership agree: %d, differ: %d; want both", agree, differ)
	}
	t.Logf("read counts checked against Redis on %d messages; %d more have a rejoined member", agree, differ)
}

// TestClickHouseReceiptsOutOfOrderAndReplay: read cursors keep the largest
// upto whatever the order, and replayed receipts are one event each.
func TestClickHouseReceiptsOutOfOrderAndReplay(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	stopMerges(t, c, "receipt_events", "read_cursors")
	offset := int64(0)
	rc := func(gid, uid string, upto int64) ReceiptRow {
		offset++
		return ReceiptRow{schema.Receipt{Gid: gid, Uid: uid, Upto: upto, At: 1_700_000_000_000 + offset}, 2, offset}
	}
	batches := [][]ReceiptRow{
		{rc("g", "a", 10)},
		{rc("g", "a", 5)},
		{rc("g", "b", 3), rc("g", "b", 12), rc("g", "b", 4), rc("h", "a", 99)},
		{rc("g", "a", 7)},
	}
	for _, batch := range append(batches, batches[2], batches[0]) { // two replayed
		if err := c.InsertReceipts(ctx, batch); err != nil {
			t.Fatalf("InsertReceipts: %v", err)
		}
	}
	for gid, want := range map[string]map[string]int64{"g": {"a": 10, "b": 12}, "h": {"a": 99}, "none": {}} {
		if got, err := c.ReadCursors(ctx, gid); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ReadCursors(%s) = %v, %v; want %v", gid, got, err, want)
		}
	}
	// The batch's own max goes to read_cursors: one row for b, not three.
	if n := rawCount(t, c, "read_cursors", "g"); n != 6 {
		t.Errorf("read_cursors holds %d rows of g, want 6", n)
	}
	if n := rawCount(t, c, "receipt_events", "g"); n != 10 {
		t.Errorf("receipt_events holds %d rows of g, want 10", n)
	}
	var events uint64
	if err := c.conn.QueryRow(ctx, "SELECT count() FROM receipt_events FINAL WHERE gid = ?", "g").Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 6 {
		t.Errorf("receipt_events FINAL holds %d events of g, want 6", events)
	}
	if err := c.InsertReceipts(ctx, []ReceiptRow{{schema.Receipt{Gid: "g", Uid: "u"}, 70000, 1}}); err == nil {
		t.Error("InsertReceipts into partition 70000: no error")
	}
	if err := c.InsertReceipts(ctx, nil); err != nil {
		t.Errorf("InsertReceipts(nil): %v", err)
	}
}

// TestRetentionDropEventsBefore drops the months of ack and receipt events
// that lie wholly before a time, and nothing else.
func TestRetentionDropEventsBefore(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	month := func(m time.Month, day int) int64 { return time.Date(2024, m, day, 12, 0, 0, 0, time.UTC).UnixMilli() }
	var (
		msgs     []schema.Message
		acks     []AckRow
		receipts []ReceiptRow
	)
	for i, at := range []int64{month(1, 5), month(1, 31), month(2, 1), month(2, 29), month(3, 1)} {
		id := int64(i)
		msgs = append(msgs, schema.Message{Gid: "g", Sender: "a", ClientMsgID: fmt.Sprint(i), SentAt: at, MsgID: id})
		acks = append(acks, AckRow{schema.Ack{Gid: "g", Uid: "b", Upto: id, At: at}, 0, id})
		receipts = append(receipts, ReceiptRow{schema.Receipt{Gid: "g", Uid: "b", Upto: id, At: at}, 0, id})
	}
	// The last second of January is January's.
	lastJan := time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC).UnixMilli() - 1
	acks = append(acks, AckRow{schema.Ack{Gid: "h", Uid: "b", Upto: 0, At: lastJan}, 1, 0})
	receipts = append(receipts, ReceiptRow{schema.Receipt{Gid: "h", Uid: "b", Upto: 0, At: lastJan}, 1, 0})
	if err := c.InsertMessages(ctx, 0, msgs); err != nil {
		t.Fatal(err)
	}
	if err := c.InsertAcks(ctx, acks); err != nil {
		t.Fatal(err)
	}
	if err := c.InsertReceipts(ctx, receipts); err != nil {
		t.Fatal(err)
	}
	months := func(table, column string) string {
		var s string
		err := c.conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(m), ' ') FROM "+
			"(SELECT DISTINCT toString(toYYYYMM("+column+")) AS m FROM "+table+" ORDER BY m)").Scan(&s)
		if err != nil {
			t.Fatalf("months of %s: %v", table, err)
		}
		return s
	}
	drop := func(before time.Time, want ...string) {
		t.Helper()
		got, err := c.DropEventsBefore(ctx, before)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("DropEventsBefore(%v) = %v, %v; want %v", before, got, err, want)
		}
	}

	// Not yet: January is not over in UTC, whatever the zone of before.
	drop(time.Date(2024, 1, 20, 0, 0, 0, 0, time.UTC))
	drop(time.Date(2024, 2, 1, 0, 30, 0, 0, time.FixedZone("CET", 3600)))
	drop(time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC), "ack_events/202401", "receipt_events/202401")
	drop(time.Date(2024, 2, 15, 0, 0, 0, 0, time.UTC)) // idempotent; February not over
	for _, table := range []string{"ack_events", "receipt_events"} {
		if got := months(table, "at"); got != "202402 202403" {
			t.Errorf("%s keeps months %q, want 202402 202403", table, got)
		}
	}
	if got := months("messages", "sent_at"); got != "202401 202402 202403" {
		t.Errorf("messages keeps months %q, want all three", got)
	}
	if n, err := c.CountMessages(ctx, "g"); err != nil || n != 5 {
		t.Errorf("CountMessages = %d, %v; want 5", n, err)
	}
	for _, gid := range []string{"g", "h"} {
		want := map[string]int64{"b": map[string]int64{"g": 4, "h": 0}[gid]}
		if got, err := c.ReadCursors(ctx, gid); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ReadCursors(%s) after the drop = %v, %v; want %v", gid, got, err, want)
		}
		if got, err := c.AckCursors(ctx, gid); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("AckCursors(%s) after the drop = %v, %v; want %v", gid, got, err, want)
		}
	}
	drop(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		"ack_events/202402", "ack_events/202403", "receipt_events/202402", "receipt_events/202403")
	drop(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	if n, err := c.CountMessages(ctx, "g"); err != nil || n != 5 {
		t.Errorf("CountMessages after dropping every event = %d, %v; want 5", n, err)
	}
}

func TestMonthEnd(t *testing.T) {
	for id, want := range map[string]time.Time{
		"202401": time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC),
		"202412": time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := monthEnd(id); err != nil || !got.Equal(want) {
			t.Errorf("monthEnd(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
	for _, id := range []string{"", "tuple()", "202413", "202400", "2024011", "all"} {
		if _, err := monthEnd(id); err == nil {
			t.Errorf("monthEnd(%q): no error", id)
		}
	}
}
