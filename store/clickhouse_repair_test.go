package store

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/groupchat/chatd/schema"
)

// tablesOf lists the tables of c's database, by name.
func tablesOf(t *testing.T, c *ClickHouse) string {
	t.Helper()
	var tables string
	err := c.conn.QueryRow(t.Context(), "SELECT arrayStringConcat(groupArray(name), ' ') FROM "+
		"(SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name)").Scan(&tables)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	return tables
}

// A table dropped while the database and schema_migrations survive comes
// back when the store is opened again (what `chatctl backfill` and every
// role's start do), with the columns later migrations added to it.
func TestClickHouseMigrateRecreatesALostTable(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	for _, table := range []string{"receipt_events", "member_events"} {
		if err := c.conn.Exec(ctx, "DROP TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
	again, err := OpenClickHouse(ctx, ClickHouseConfig{Addrs: c.cfg.Addrs, Database: c.cfg.Database})
	if err != nil {
		t.Fatalf("open after dropping two tables: %v", err)
	}
	defer again.Close()
	if got, want := tablesOf(t, c), "ack_cursors ack_events member_events messages read_cursors receipt_events schema_migrations"; got != want {
		t.Fatalf("tables after opening again: %s; want %s", got, want)
	}
	err = again.InsertReceipts(ctx, []ReceiptRow{{Receipt: schema.Receipt{Gid: "g", Uid: "u", Upto: 3, At: 1_700_000_000_000}}})
	if err != nil {
		t.Errorf("insert receipts into the recreated receipt_events: %v", err)
	}
	err = again.InsertMembers(ctx, []MemberRow{{Member: schema.Member{Gid: "g", Uid: "u", Op: schema.OpLeave, Pos: 4, HasJoined: true, Joined: 1}}})
	if err != nil {
		t.Errorf("insert members into the recreated member_events (0005 adds its joined column): %v", err)
	}
}

// Only idempotent creates are replayed: a lost table that a later
// migration altered in another way than adding a column is not recreated
// half way; Migrate names the table and the statement to apply by hand.
func TestClickHouseMigrateDoesNotReplayAnAlter(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	fsys := fstest.MapFS{
		"m/0001_t.sql":      {Data: []byte("CREATE TABLE IF NOT EXISTS t (a UInt8, b UInt8) ENGINE = MergeTree ORDER BY a;\nCREATE TABLE IF NOT EXISTS u (a UInt8) ENGINE = MergeTree ORDER BY a")},
		"m/0002_add.sql":    {Data: []byte("ALTER TABLE u ADD COLUMN b Int64 DEFAULT -2")},
		"m/0003_modify.sql": {Data: []byte("ALTER TABLE t MODIFY COLUMN b UInt16")},
	}
	if err := c.migrate(ctx, fsys, "m"); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"t", "u"} {
		if err := c.conn.Exec(ctx, "DROP TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
	err := c.migrate(ctx, fsys, "m")
	if err == nil || !strings.Contains(err.Error(), "table t") || !strings.Contains(err.Error(), "0003_modify.sql") {
		t.Fatalf("migrate with t lost and altered by 0003: %v; want an error naming t and 0003_modify.sql", err)
	}
	t.Logf("error: %v", err)
	for _, table := range strings.Fields(tablesOf(t, c)) {
		if table == "t" || table == "u" {
			t.Errorf("table %s recreated although the repair was refused", table)
		}
	}
	delete(fsys, "m/0003_modify.sql")
	if err := c.migrate(ctx, fsys, "m"); err != nil {
		t.Fatalf("migrate with t and u lost, u altered by ADD COLUMN only: %v", err)
	}
	var cols string
	err = c.conn.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(name), ' ') FROM "+
		"(SELECT name FROM system.columns WHERE database = currentDatabase() AND table = 'u' ORDER BY name)").Scan(&cols)
	if err != nil || cols != "a b" {
		t.Errorf("columns of the recreated u: %q, %v; want a b", cols, err)
	}
}

// A running persister or projector whose table (or database) went away
// retries its insert for ever: the error it logs says how to recover.
func TestClickHouseInsertIntoALostTableSaysWhatToDo(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	if err := c.conn.Exec(ctx, "DROP TABLE messages"); err != nil {
		t.Fatal(err)
	}
	msgs := testMessages("g", 0, 1, 2)
	for _, what := range []string{"table", "database"} {
		err := c.InsertMessages(ctx, 0, msgs)
		if err == nil || !strings.Contains(err.Error(), "doesn't exist") ||
			!strings.Contains(err.Error(), "run chatctl backfill, or restart the role, which recreates the schema") {
			t.Errorf("insert with the %s dropped: %v; want the server's error and what to do", what, err)
		}
		if _, err := c.Messages(ctx, "g", -1, 10, 10); err == nil || !strings.Contains(err.Error(), "run chatctl backfill") {
			t.Errorf("a page with the %s dropped: %v; want the server's error and what to do", what, err)
		}
		t.Logf("%s dropped: %v", what, err)
		if what == "table" {
			if err := c.conn.Exec(context.Background(), "DROP DATABASE `"+c.cfg.Database+"`"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// What a restart or `chatctl backfill` does; the retry then succeeds.
	again, err := OpenClickHouse(ctx, ClickHouseConfig{Addrs: c.cfg.Addrs, Database: c.cfg.Database})
	if err != nil {
		t.Fatalf("open after dropping the database: %v", err)
	}
	again.Close()
	if err := c.InsertMessages(ctx, 0, msgs); err != nil {
		t.Errorf("insert retried once the schema was recreated: %v", err)
	}
}

// Every statement of the shipped migrations is one that Migrate can
// replay when its table is lost: an idempotent create, or an ADD COLUMN
// (skipped when the column is there). Another kind of statement needs
// the repair taught about it first.
func TestClickHouseDDLIsRepairable(t *testing.T) {
	files, err := schema.ClickHouseDDL.ReadDir("clickhouse")
	if err != nil || len(files) == 0 {
		t.Fatalf("read the migrations: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		text, err := schema.ClickHouseDDL.ReadFile("clickhouse/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for i, stmt := range splitStatements(string(text)) {
			if createTable.MatchString(stmt) || addColumn.MatchString(stmt) {
				continue
			}
			t.Errorf("%s statement %d is neither CREATE TABLE IF NOT EXISTS nor ALTER TABLE ... ADD COLUMN:\n%s", f.Name(), i+1, stmt)
		}
	}
}
