package store

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/groupchat/chatd/schema"
)

// Migrate applies the files of schema.ClickHouseDDL that are not yet
// recorded in schema_migrations, in name order, and records each. Then it
// recreates any table the files create that is missing (dropped while
// schema_migrations was kept; see recreateLost). Running it again is a
// no-op. Concurrent runs are harmless: every statement is idempotent, and
// an ADD COLUMN that fails because another run added the column is taken
// as done.
func (c *ClickHouse) Migrate(ctx context.Context) error {
	return c.migrate(ctx, schema.ClickHouseDDL, "clickhouse")
}

func (c *ClickHouse) migrate(ctx context.Context, fsys fs.FS, dir string) error {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return fmt.Errorf("clickhouse: migrate: %w", err)
	}
	sort.Strings(names)
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	err = c.conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS schema_migrations "+
		"(version String, applied_at_ms Int64) ENGINE = ReplacingMergeTree ORDER BY version")
	if err != nil {
		return fmt.Errorf("clickhouse: migrate: create schema_migrations: %w", err)
	}
	applied, err := c.appliedVersions(ctx)
	if err != nil {
		return fmt.Errorf("clickhouse: migrate: %w", err)
	}
	for _, name := range names {
		version := path.Base(name)
		if applied[version] {
			continue
		}
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return fmt.Errorf("clickhouse: migrate %s: %w", version, err)
		}
		for i, stmt := range splitStatements(string(text)) {
			if err := c.execIdempotent(ctx, stmt); err != nil {
				return fmt.Errorf("clickhouse: migrate %s: statement %d: %w", version, i+1, err)
			}
		}
		if err := c.recordVersion(ctx, version); err != nil {
			return fmt.Errorf("clickhouse: migrate %s: record version: %w", version, err)
		}
	}
	return c.recreateLost(ctx, fsys, names)
}

// execIdempotent runs stmt, but for an ADD COLUMN of a column the table
// has already.
func (c *ClickHouse) execIdempotent(ctx context.Context, stmt string) error {
	done, err := c.columnAdded(ctx, stmt)
	if err != nil || done {
		return err
	}
	if err = c.conn.Exec(ctx, stmt); err != nil {
		// A run beside this one may have added it between the look and
		// the ALTER (chatd's roles start together).
		if added, lerr := c.columnAdded(ctx, stmt); lerr == nil && added {
			err = nil
		}
	}
	return err
}

func (c *ClickHouse) appliedVersions(ctx context.Context) (map[string]bool, error) {
	applied := make(map[string]bool)
	err := c.eachRow(ctx, func(rows driver.Rows) error {
		var v string
		err := rows.Scan(&v)
		applied[v] = true
		return err
	}, "SELECT DISTINCT version FROM schema_migrations")
	return applied, err
}

func (c *ClickHouse) recordVersion(ctx context.Context, version string) error {
	return c.sendBatch(ctx, "INSERT INTO schema_migrations (version, applied_at_ms)",
		[]string{version}, []int64{time.Now().UnixMilli()})
}

// addColumn matches "ALTER TABLE t ADD COLUMN c ...", the one statement
// 18.16 cannot make idempotent (it has no ADD COLUMN IF NOT EXISTS).
var addColumn = regexp.MustCompile("(?is)^ALTER\\s+TABLE\\s+`?(\\w+)`?\\s+ADD\\s+COLUMN\\s+`?(\\w+)`?\\s")

// columnAdded reports whether stmt adds a column that the table already
// has: a migration interrupted after it runs again without failing there.
func (c *ClickHouse) columnAdded(ctx context.Context, stmt string) (bool, error) {
	m := addColumn.FindStringSubmatch(stmt)
	if m == nil {
		return false, nil
	}
	var n uint64
	err := c.conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = currentDatabase() AND table = ? AND name = ?",
		m[1], m[2]).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look for column %s.%s: %w", m[1], m[2], err)
	}
	return n > 0, nil
}

// splitStatements drops "--" line comments and splits on ";".
func splitStatements(text string) []string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	var stmts []string
	for _, s := range strings.Split(b.String(), ";") {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts
}
