package schema

import "embed"

// ClickHouseDDL holds the ClickHouse migrations, clickhouse/NNNN_name.sql,
// applied in name order by the ClickHouse store, which records each applied
// file in its schema_migrations table. A file holds one or more statements
// separated by ";" (none inside literals) and "--" line comments; every
// statement is idempotent (CREATE ... IF NOT EXISTS, or ALTER TABLE ... ADD
// COLUMN, which the store skips when the column exists: 18.16 has no
// IF NOT EXISTS there), so a migration interrupted half way is safe to run
// again. The store also replays a file's creates, and the ADD COLUMNs of
// later files, when a table is missing although its file is recorded; it
// replays no other kind of statement, so a file that needs another kind
// needs that repair taught about it first.
//
// Table names are unqualified: the store connects with its database
// selected. The DDL runs on ClickHouse 18.16 (Debian's package) and on
// current releases, so it avoids TTL, LowCardinality, DateTime64 and CODEC.
// Deduplication relies on ReplacingMergeTree keys (a replayed Kafka record
// becomes one row after a merge) plus queries that are exact before it
// (FINAL, max, uniqExact). Time-partitioned tables are partitioned by UTC
// month, and retention drops partitions.
//
// Released files never change; a schema change is a new file.
//
//go:embed clickhouse/*.sql
var ClickHouseDDL embed.FS
