package store

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

var testDatabaseSeq atomic.Int64

// testClickHouse opens a store on a fresh database of the test binary's
// shared clickhouse-server (started on first use) and drops the database
// when the test ends.
func testClickHouse(t testing.TB) *ClickHouse {
	t.Helper()
	return openTestClickHouse(t, testserver.SharedClickHouse(t), ClickHouseConfig{})
}

var nonIdent = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// openTestClickHouse opens a store on a fresh database of srv.
func openTestClickHouse(t testing.TB, srv *testserver.ClickHouse, cfg ClickHouseConfig) *ClickHouse {
	t.Helper()
	name := nonIdent.ReplaceAllString(t.Name(), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	cfg.Addrs = []string{srv.Addr}
	cfg.Database = fmt.Sprintf("t%d_%s", testDatabaseSeq.Add(1), name)
	c, err := OpenClickHouse(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open clickhouse store: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.conn.Exec(ctx, "DROP DATABASE IF EXISTS `"+c.cfg.Database+"`"); err != nil {
			t.Logf("drop test database: %v", err)
		}
		c.Close()
	})
	return c
}

// testMessages returns n messages of gid with msgids first, first+step, ….
func testMessages(gid string, first, step int64, n int) []schema.Message {
	bodies := [][]byte{
		nil,
		[]byte("hello"),
		[]byte("héllo wörld, 你好, 🙂👍🏽, עברית"),
		[]byte("quotes ' \" ` and \\ backslash, \x00 NUL, \n newline, ?"),
	}
	msgs := make([]schema.Message, n)
	for i := range msgs {
		msgs[i] = schema.Message{
			Gid:         gid,
			Sender:      fmt.Sprintf("u%d", i%3),
			ClientMsgID: fmt.Sprintf("c-%s-%d", gid, i),
			SentAt:      1_700_000_000_000 + int64(i)*1000,
			Body:        bodies[i%len(bodies)],
			MsgID:       first + int64(i)*step,
		}
	}
	return msgs
}

func equalMessage(a, b schema.Message) bool {
	return a.Gid == b.Gid && a.Sender == b.Sender && a.ClientMsgID == b.ClientMsgID &&
		a.SentAt == b.SentAt && bytes.Equal(a.Body, b.Body) && a.MsgID == b.MsgID
}

// stopMerges keeps duplicates unmerged, so that reads are tested against
// them rather than against a table a background merge already cleaned.
func stopMerges(t *testing.T, c *ClickHouse, tables ...string) {
	t.Helper()
	for _, table := range tables {
		if err := c.conn.Exec(t.Context(), "SYSTEM STOP MERGES "+table); err != nil {
			t.Fatalf("stop merges of %s: %v", table, err)
		}
	}
}

func rawCount(t *testing.T, c *ClickHouse, table, gid string) uint64 {
	t.Helper()
	var n uint64
	if err := c.conn.QueryRow(t.Context(), "SELECT count() FROM "+table+" WHERE gid = ?", gid).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestClickHouseConfig(t *testing.T) {
	var cfg ClickHouseConfig
	cfg.setDefaults()
	if cfg.Database != "chat" || cfg.Username != "default" || cfg.DialTimeout != 5*time.Second || cfg.QueryTimeout != 30*time.Second ||
		cfg.MaxOpenConns != 10 {
		t.Errorf("defaults: %+v", cfg)
	}
	if err := cfg.Validate(); err == nil {
		t.Error("Validate without Addrs: no error")
	}
	for _, db := range []string{"chat-prod", "1chat", "a`b", "x y"} {
		bad := cfg
		bad.Addrs, bad.Database = []string{"127.0.0.1:9000"}, db
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate database %q: no error", db)
		}
	}
	cfg.Addrs = []string{"localhost"}
	if err := cfg.Validate(); err == nil {
		t.Error("Validate address without port: no error")
	}
	cfg.Addrs = []string{"127.0.0.1:9000", "[::1]:9000"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// MaxOpenConns is the pool's size: with its connections held, a query
// waits for one at most DialTimeout, then fails.
func TestClickHouseMaxOpenConns(t *testing.T) {
	c := openTestClickHouse(t, testserver.SharedClickHouse(t), ClickHouseConfig{MaxOpenConns: 2, DialTimeout: 300 * time.Millisecond})
	ctx := t.Context()
	for range 2 { // rows hold their connection until closed
		rows, err := c.Query(ctx, "SELECT number FROM system.numbers LIMIT 1000000")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
	}
	start := time.Now()
	err := c.Ping(ctx)
	if took := time.Since(start); err == nil || took > 5*time.Second {
		t.Fatalf("a ping with the pool's 2 connections held: %v after %v; want it to fail after about 300ms", err, took)
	}
}

func TestClickHouseMigrateTwice(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	countVersions := func() uint64 {
		var n uint64
		if err := c.conn.QueryRow(ctx, "SELECT count() FROM schema_migrations").Scan(&n); err != nil {
			t.Fatalf("count versions: %v", err)
		}
		return n
	}
	files, _ := schema.ClickHouseDDL.ReadDir("clickhouse")
	if got := countVersions(); got != uint64(len(files)) || got == 0 {
		t.Fatalf("after open: %d versions recorded, want %d", got, len(files))
	}
	if err := c.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	again, err := OpenClickHouse(ctx, ClickHouseConfig{Addrs: c.cfg.Addrs, Database: c.cfg.Database})
	if err != nil {
		t.Fatalf("open again: %v", err)
	}
	again.Close()
	if got := countVersions(); got != uint64(len(files)) {
		t.Errorf("after migrating again: %d versions recorded, want %d", got, len(files))
	}
	var tables string
	err = c.conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(name), ' ') FROM "+
		"(SELECT name FROM system.tables WHERE database = ? ORDER BY name)", c.cfg.Database).Scan(&tables)
	if want := "ack_cursors ack_events member_events messages read_cursors receipt_events schema_migrations"; err != nil || tables != want {
		t.Errorf("tables: %q, %v; want %s", tables, err, want)
	}
}

// A migration that adds a column, interrupted after the ALTER but before
// its version was recorded, runs again without failing on the column.
func TestClickHouseMigrateAddColumnRunsAgain(t *testing.T) {
	c := testClickHouse(t)
	fsys := fstest.MapFS{
		"m/0001_t.sql":   {Data: []byte("CREATE TABLE IF NOT EXISTS t (a UInt8) ENGINE = MergeTree ORDER BY a;")},
		"m/0002_add.sql": {Data: []byte("-- a column\nALTER TABLE t ADD COLUMN b Int64 DEFAULT -2;\nalter table `t` add column `c` String")},
	}
	if err := c.migrate(t.Context(), fsys, "m"); err != nil {
		t.Fatal(err)
	}
	// The same statements under a version not yet recorded: what a run
	// interrupted after the ALTERs and before the record finds.
	fsys["m/0003_add_again.sql"] = fsys["m/0002_add.sql"]
	if err := c.migrate(t.Context(), fsys, "m"); err != nil {
		t.Fatalf("migrating again after an interrupted ADD COLUMN: %v", err)
	}
	var cols string
	err := c.conn.QueryRow(t.Context(), "SELECT arrayStringConcat(groupArray(name), ' ') FROM "+
		"(SELECT name FROM system.columns WHERE database = currentDatabase() AND table = 't' ORDER BY name)").Scan(&cols)
	if err != nil || cols != "a b c" {
		t.Fatalf("columns of t: %q, %v; want a b c", cols, err)
	}
	if applied, _ := c.appliedVersions(t.Context()); !applied["0003_add_again.sql"] {
		t.Fatal("0003_add_again.sql not recorded")
	}
}

// Processes that start together migrate together: each looks for the
// column, finds none, and ALTERs; all but the first ALTER find the column
// there ("column with this name already exists"), which is not a failure.
func TestClickHouseMigrateAddColumnConcurrently(t *testing.T) {
	c := testClickHouse(t)
	fsys := fstest.MapFS{
		"m/0001_t.sql":   {Data: []byte("CREATE TABLE IF NOT EXISTS t (a UInt8) ENGINE = MergeTree ORDER BY a;")},
		"m/0002_add.sql": {Data: []byte("ALTER TABLE t ADD COLUMN b Int64 DEFAULT -2;\nALTER TABLE t ADD COLUMN c String")},
	}
	if err := c.migrate(t.Context(), fsys, "m"); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		add := fmt.Sprintf("m/%04d_add.sql", round+3)
		fsys[add] = &fstest.MapFile{Data: []byte(fmt.Sprintf("ALTER TABLE t ADD COLUMN r%d Int64 DEFAULT 0", round))}
		errs := make(chan error, 8)
		for range cap(errs) {
			go func() { errs <- c.migrate(t.Context(), fsys, "m") }()
		}
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: one of %d migrations started together failed: %v", round, cap(errs), err)
			}
		}
	}
}

func TestClickHouseMigrateFailingFile(t *testing.T) {
	c := testClickHouse(t)
	fsys := fstest.MapFS{
		"m/0001_ok.sql":  {Data: []byte("-- fine\nCREATE TABLE IF NOT EXISTS ok (a UInt8) ENGINE = MergeTree ORDER BY a;")},
		"m/0002_bad.sql": {Data: []byte("CREATE TABLE IF NOT EXISTS bad (a UInt8) ENGINE = MergeTree ORDER BY a;\nCREATE TABLE nonsense (")},
	}
	err := c.migrate(t.Context(), fsys, "m")
	if err == nil || !strings.Contains(err.Error(), "0002_bad.sql") || !strings.Contains(err.Error(), "statement 2") {
		t.Fatalf("migrate with a bad file: %v, want an error naming 0002_bad.sql, statement 2", err)
	}
	t.Logf("error: %v", err)
	applied, err := c.appliedVersions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !applied["0001_ok.sql"] || applied["0002_bad.sql"] {
		t.Errorf("applied versions %v, want 0001_ok.sql only", applied)
	}
}

func TestClickHouseMessagesPaging(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	// Two groups share a partition: their msgids interleave.
	g1 := testMessages("g1", 0, 2, 25)
	g2 := testMessages("g2", 1, 2, 25)
	if err := c.InsertMessages(ctx, 7, append(append([]schema.Message(nil), g1...), g2...)); err != nil {
		t.Fatalf("InsertMessages: %v", err)
	}
	var got []schema.Message
	after := int64(-1)
	for page := 0; ; page++ {
		msgs, err := c.Messages(ctx, "g1", after, math.MaxInt64, 10)
		if err != nil {
			t.Fatalf("Messages(after %d): %v", after, err)
		}
		if len(msgs) > 10 {
			t.Fatalf("page %d: %d messages, limit 10", page, len(msgs))
		}
		if len(msgs) == 0 {
			break
		}
		if want := min(10, len(g1)-len(got)); len(msgs) != want {
			t.Errorf("page %d: %d messages, want %d", page, len(msgs), want)
		}
		got = append(got, msgs...)
		after = msgs[len(msgs)-1].MsgID
	}
	if len(got) != len(g1) {
		t.Fatalf("paged %d messages, want %d", len(got), len(g1))
	}
	for i := range g1 {
		if !equalMessage(got[i], g1[i]) {
			t.Errorf("message %d: got %+v, want %+v", i, got[i], g1[i])
		}
	}
	// A page that starts in the middle is the contiguous run after it.
	msgs, err := c.Messages(ctx, "g1", 9, math.MaxInt64, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 3 || msgs[0].MsgID != 10 || msgs[1].MsgID != 12 || msgs[2].MsgID != 14 {
		t.Errorf("Messages(after 9, limit 3): %v", msgids(msgs))
	}
	// An upper bound ends the run there, inclusive.
	if msgs, err := c.Messages(ctx, "g1", 9, 14, 10); err != nil || fmt.Sprint(msgids(msgs)) != "[10 12 14]" {
		t.Errorf("Messages(after 9, upto 14): %v, %v; want [10 12 14]", msgids(msgs), err)
	}
	if msgs, err := c.Messages(ctx, "g1", 9, 9, 10); err != nil || len(msgs) != 0 {
		t.Errorf("Messages(after 9, upto 9): %v, %v; want none", msgids(msgs), err)
	}
	if n, err := c.CountMessages(ctx, "g2"); err != nil || n != 25 {
		t.Errorf("CountMessages(g2) = %d, %v; want 25", n, err)
	}
	if msgs, err := c.Messages(ctx, "nobody", -1, math.MaxInt64, 10); err != nil || len(msgs) != 0 {
		t.Errorf("Messages of an unknown group: %v, %v", msgids(msgs), err)
	}
	if _, err := c.Messages(ctx, "g1", -1, math.MaxInt64, 0); err == nil {
		t.Error("Messages with limit 0: no error")
	}
}

func msgids(msgs []schema.Message) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.MsgID
	}
	return ids
}

// TestClickHouseReplay inserts everything twice, as a consumer that crashed
// before committing its offsets does, and reads each fact once.
func TestClickHouseReplay(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	stopMerges(t, c, "messages", "ack_events", "ack_cursors", "member_events")
	msgs := testMessages("g", 100, 1, 30)
	acks := []AckRow{
		{schema.Ack{Gid: "g", Uid: "a", Upto: 110, At: 1}, 3, 500},
		{schema.Ack{Gid: "g", Uid: "b", Upto: 129, At: 2}, 3, 501},
		{schema.Ack{Gid: "g", Uid: "a", Upto: 120, At: 3}, 3, 502},
	}
	members := []MemberRow{
		{schema.Member{Gid: "g", Uid: "a", Op: schema.OpJoin, Pos: -1, At: 1, By: "admin"}, 3, 10},
		{schema.Member{Gid: "g", Uid: "b", Op: schema.OpJoin, Pos: 99, At: 2}, 3, 11},
		{schema.Member{Gid: "g", Uid: "b", Op: schema.OpLeaving, Pos: 119, At: 3, HasJoined: true, Joined: 99}, 3, 12}, // no row
		{schema.Member{Gid: "g", Uid: "b", Op: schema.OpLeave, Pos: 120, At: 3, By: "b"}, 3, 13},
	}
	for range 2 {
		if err := c.InsertMessages(ctx, 3, msgs); err != nil {
			t.Fatalf("InsertMessages: %v", err)
		}
		if err := c.InsertAcks(ctx, acks); err != nil {
			t.Fatalf("InsertAcks: %v", err)
		}
		if err := c.InsertMembers(ctx, members); err != nil {
			t.Fatalf("InsertMembers: %v", err)
		}
	}
	if n := rawCount(t, c, "messages", "g"); n != 60 {
		t.Fatalf("messages holds %d rows, want 60 unmerged duplicates", n)
	}
	check := func(when string) {
		got, err := c.Messages(ctx, "g", -1, math.MaxInt64, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(msgs) {
			t.Fatalf("%s: Messages returned %d, want %d: %v", when, len(got), len(msgs), msgids(got))
		}
		for i := range got {
			if !equalMessage(got[i], msgs[i]) {
				t.Errorf("%s: message %d: got %+v, want %+v", when, i, got[i], msgs[i])
			}
		}
		if n, err := c.CountMessages(ctx, "g"); err != nil || n != 30 {
			t.Errorf("%s: CountMessages = %d, %v; want 30", when, n, err)
		}
		cursors, err := c.AckCursors(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		if len(cursors) != 2 || cursors["a"] != 120 || cursors["b"] != 129 {
			t.Errorf("%s: AckCursors = %v, want a:120 b:129", when, cursors)
		}
		var events uint64
		err = c.conn.QueryRow(ctx, "SELECT count() FROM ack_events FINAL WHERE gid = ?", "g").Scan(&events)
		if err != nil {
			t.Fatal(err)
		}
		if events != 3 {
			t.Errorf("%s: ack_events FINAL holds %d events, want 3", when, events)
		}
		var members, left uint64
		err = c.conn.QueryRow(ctx, "SELECT count(), countIf(op = 'leave' AND `by` = 'b' AND pos = 120) "+
			"FROM member_events FINAL WHERE gid = ?", "g").Scan(&members, &left)
		if err != nil {
			t.Fatal(err)
		}
		if members != 3 || left != 1 {
			t.Errorf("%s: member_events FINAL: %d events, %d leaves of b; want 3, 1", when, members, left)
		}
	}
	check("before merge")
	for _, table := range []string{"messages", "ack_events", "ack_cursors", "member_events"} {
		if err := c.conn.Exec(ctx, "SYSTEM START MERGES "+table); err != nil {
			t.Fatal(err)
		}
		if err := c.conn.Exec(ctx, "OPTIMIZE TABLE "+table+" FINAL"); err != nil {
			t.Fatalf("optimize %s: %v", table, err)
		}
	}
	if n := rawCount(t, c, "messages", "g"); n != 30 {
		t.Errorf("messages holds %d rows after OPTIMIZE FINAL, want 30", n)
	}
	check("after merge")
}

func TestClickHouseAckCursorsOutOfOrder(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	stopMerges(t, c, "ack_cursors")
	offset := int64(0)
	ack := func(gid, uid string, upto int64) AckRow {
		offset++
		return AckRow{schema.Ack{Gid: gid, Uid: uid, Upto: upto, At: offset}, 0, offset}
	}
	for _, batch := range [][]AckRow{
		{ack("g", "a", 10)},
		{ack("g", "a", 5)},
		{ack("g", "b", 3), ack("g", "b", 12), ack("g", "b", 4), ack("h", "a", 99)},
		{ack("g", "a", 7)},
	} {
		if err := c.InsertAcks(ctx, batch); err != nil {
			t.Fatalf("InsertAcks: %v", err)
		}
	}
	cursors, err := c.AckCursors(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(cursors) != 2 || cursors["a"] != 10 || cursors["b"] != 12 {
		t.Errorf("AckCursors(g) = %v, want a:10 b:12", cursors)
	}
	// The batch's own max goes to ack_cursors: one row for b, not three.
	if n := rawCount(t, c, "ack_cursors", "g"); n != 4 {
		t.Errorf("ack_cursors holds %d rows of g, want 4", n)
	}
	if n := rawCount(t, c, "ack_events", "g"); n != 6 {
		t.Errorf("ack_events holds %d rows of g, want 6", n)
	}
}

func TestClickHouseRejectsBadPositions(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	if err := c.InsertMessages(ctx, 70000, testMessages("g", 0, 1, 1)); err == nil {
		t.Error("InsertMessages into partition 70000: no error")
	}
	if err := c.InsertMessages(ctx, 0, testMessages("g", -5, 1, 1)); err == nil {
		t.Error("InsertMessages with msgid -5: no error")
	}
	bad := []MemberRow{{schema.Member{Gid: "g", Uid: "u", Op: 9}, 0, 1}}
	if err := c.InsertMembers(ctx, bad); err == nil {
		t.Error("InsertMembers with op 9: no error")
	}
	if err := c.InsertAcks(ctx, []AckRow{{schema.Ack{Gid: "g", Uid: "u"}, -1, 1}}); err == nil {
		t.Error("InsertAcks into partition -1: no error")
	}
}

// TestClickHouseOutage stops, freezes and restarts a server of its own: a
// call fails within the timeouts instead of hanging, and works again once
// the server is back.
func TestClickHouseOutage(t *testing.T) {
	srv := testserver.NewClickHouse(t)
	cfg := ClickHouseConfig{DialTimeout: time.Second, QueryTimeout: 3 * time.Second}
	c := openTestClickHouse(t, srv, cfg)
	ctx := t.Context()
	batch := func(i int) []schema.Message { return testMessages("g", int64(i)*10, 1, 10) }
	if err := c.InsertMessages(ctx, 0, batch(0)); err != nil {
		t.Fatalf("insert before the outage: %v", err)
	}
	mustFailFast := func(what string, i int) {
		t.Helper()
		start := time.Now()
		err := c.InsertMessages(ctx, 0, batch(i))
		took := time.Since(start)
		if err == nil {
			t.Fatalf("%s: insert succeeded", what)
		}
		if took > cfg.DialTimeout+cfg.QueryTimeout+2*time.Second {
			t.Errorf("%s: insert took %v to fail", what, took)
		}
		t.Logf("%s: insert failed after %v: %v", what, took.Round(time.Millisecond), err)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	mustFailFast("server stopped", 1)
	if err := c.Ping(ctx); err == nil {
		t.Error("Ping of a stopped server: no error")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.InsertMessages(ctx, 0, batch(1)); err != nil {
		t.Fatalf("insert after restart: %v", err)
	}

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	mustFailFast("server frozen", 2)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := c.InsertMessages(ctx, 0, batch(2)); err != nil {
		t.Fatalf("insert after resume: %v", err)
	}

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	mustFailFast("server killed", 3)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.InsertMessages(ctx, 0, batch(3)); err != nil {
		t.Fatalf("insert after kill and restart: %v", err)
	}
	if n, err := c.CountMessages(ctx, "g"); err != nil || n != 40 {
		t.Errorf("CountMessages = %d, %v; want 40", n, err)
	}
}

// BenchmarkClickHouseInsertMessages inserts batches of 10,000 messages with
// 200-byte bodies into the shared server.
func BenchmarkClickHouseInsertMessages(b *testing.B) {
	const batchSize = 10_000
	c := testClickHouse(b)
	ctx := b.Context()
	body := bytes.Repeat([]byte("x"), 200)
	msgs := make([]schema.Message, batchSize)
	for i := range msgs {
		msgs[i] = schema.Message{
			Gid:         fmt.Sprintf("group-%03d", i%100),
			Sender:      fmt.Sprintf("user-%04d", i%1000),
			ClientMsgID: fmt.Sprintf("client-%08d", i),
			SentAt:      1_700_000_000_000 + int64(i),
			Body:        body,
		}
	}
	next := int64(0)
	for b.Loop() {
		for i := range msgs {
			msgs[i].MsgID = next
			next++
		}
		if err := c.InsertMessages(ctx, 0, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(next)/b.Elapsed().Seconds(), "rows/s")
	b.SetBytes(int64(batchSize * len(body)))
}
