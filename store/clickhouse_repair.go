package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// createTable matches "CREATE TABLE IF NOT EXISTS t", the create that
// recreateLost replays.
var createTable = regexp.MustCompile("(?is)^CREATE\\s+TABLE\\s+IF\\s+NOT\\s+EXISTS\\s+`?(\\w+)`?[\\s(]")

// alterTable matches any "ALTER TABLE t ...".
var alterTable = regexp.MustCompile("(?is)^ALTER\\s+TABLE\\s+`?(\\w+)`?\\s")

// statement is one statement of a migration file.
type statement struct {
	version string // the file's name
	n       int    // from 1
	text    string
}

// tableDDL is a table a migration creates and the ALTERs of it that later
// statements make.
type tableDDL struct {
	name   string
	create statement
	alters []statement
}

// recreateLost recreates the tables that the migration files (names, all
// applied) create but the database lacks: a table dropped by hand while
// schema_migrations still records its file would otherwise stay lost, and
// every insert into it fail. A lost table is made by its CREATE TABLE IF
// NOT EXISTS, then the ADD COLUMNs of later files, in file order (each
// skipped when the column is there, so a run beside this one is harmless).
// A lost table that a later file alters in any other way is not recreated
// at all: replaying such an ALTER is not known to be safe, and a table
// made from its create alone would have the wrong shape for good. The
// error names the table and the statement, for the operator to apply by
// hand. Statements that are neither a create nor an ALTER are not
// replayed.
//
// The rows of a recreated table are gone: `chatctl backfill` fills it
// again from the topics.
func (c *ClickHouse) recreateLost(ctx context.Context, fsys fs.FS, names []string) error {
	var tables []*tableDDL
	byName := make(map[string]*tableDDL)
	for _, name := range names {
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("clickhouse: migrate: %w", err)
		}
		version := path.Base(name)
		for i, stmt := range splitStatements(string(text)) {
			st := statement{version, i + 1, stmt}
			if m := createTable.FindStringSubmatch(stmt); m != nil {
				if byName[m[1]] == nil {
					byName[m[1]] = &tableDDL{name: m[1]}
					tables = append(tables, byName[m[1]])
				}
				*byName[m[1]] = tableDDL{name: m[1], create: st}
			} else if m := alterTable.FindStringSubmatch(stmt); m != nil && byName[m[1]] != nil {
				byName[m[1]].alters = append(byName[m[1]].alters, st)
			}
		}
	}
	have, err := c.tableNames(ctx)
	if err != nil {
		return fmt.Errorf("clickhouse: migrate: %w", err)
	}
	var lost []*tableDDL
	for _, t := range tables {
		if !have[t.name] {
			lost = append(lost, t)
		}
	}
	for _, t := range lost {
		for _, a := range t.alters {
			if !addColumn.MatchString(a.text) {
				return fmt.Errorf("clickhouse: migrate: table %s is missing; %s creates it, but %s statement %d alters it "+
					"otherwise than by ADD COLUMN, which is not replayed: create it by hand from those files, in order", t.name, t.create.version, a.version, a.n)
			}
		}
	}
	for _, t := range lost {
		for _, st := range append([]statement{t.create}, t.alters...) {
			if err := c.execIdempotent(ctx, st.text); err != nil {
				return fmt.Errorf("clickhouse: migrate: recreate lost table %s: %s statement %d: %w", t.name, st.version, st.n, err)
			}
		}
	}
	return nil
}

// tableNames returns the tables of the store's database.
func (c *ClickHouse) tableNames(ctx context.Context) (map[string]bool, error) {
	have := make(map[string]bool)
	err := c.eachRow(ctx, func(rows driver.Rows) error {
		var name string
		err := rows.Scan(&name)
		have[name] = true
		return err
	}, "SELECT name FROM system.tables WHERE database = currentDatabase()")
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	return have, nil
}

// schemaLostHint is what to do when an insert or a query finds its table or database
// gone (dropped by hand while the roles ran): the persister and the
// projectors retry it until one of these recreates the schema.
const schemaLostHint = "run chatctl backfill, or restart the role, which recreates the schema"

// ClickHouse's codes for a missing table and a missing database.
const (
	codeUnknownTable    = 60
	codeUnknownDatabase = 81
)

// hintSchemaLost adds schemaLostHint to an error that says the table or
// the database does not exist; other errors it returns as they are.
func hintSchemaLost(err error) error {
	var e *clickhouse.Exception
	if err == nil || !errors.As(err, &e) || (e.Code != codeUnknownTable && e.Code != codeUnknownDatabase) {
		return err
	}
	return fmt.Errorf("%w (%s)", err, schemaLostHint)
}
