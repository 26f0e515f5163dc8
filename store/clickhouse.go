package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/groupchat/chatd/internal/tlsclient"
	"github.com/groupchat/chatd/metrics"
	"github.com/groupchat/chatd/schema"
)

// ClickHouseConfig configures a ClickHouse store.
type ClickHouseConfig struct {
	Addrs        []string          // native protocol host:port; required
	Database     string            // default "chat"; created if missing
	Username     string            // default "default"
	Password     string            // default ""
	DialTimeout  time.Duration     // default 5s; also bounds waiting for a pooled connection
	QueryTimeout time.Duration     // default 30s; bounds every call, including a batch insert
	MaxOpenConns int               // default 10; the pool's connections, all kept when idle
	TLS          *tlsclient.Client // nil: plaintext; else TLS (ClickHouse's secure native port), each connection checked against the CA file as it is then
	Metrics      *metrics.Set      // optional: times inserts and queries (chat_store_seconds)
}

func (c *ClickHouseConfig) setDefaults() {
	if c.Database == "" {
		c.Database = "chat"
	}
	if c.Username == "" {
		c.Username = "default"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 30 * time.Second
	}
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = 10
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Validate reports the first problem with c (after defaults are applied).
func (c ClickHouseConfig) Validate() error {
	if len(c.Addrs) == 0 {
		return errors.New("clickhouse: config: no Addrs")
	}
	for _, a := range c.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("clickhouse: config: address %q: %w", a, err)
		}
	}
	if !identRE.MatchString(c.Database) {
		return fmt.Errorf("clickhouse: config: database %q: want letters, digits and _, not starting with a digit", c.Database)
	}
	if c.DialTimeout < 0 || c.QueryTimeout < 0 {
		return errors.New("clickhouse: config: negative timeout")
	}
	if c.MaxOpenConns < 0 {
		return fmt.Errorf("clickhouse: config: MaxOpenConns %d, want >= 1", c.MaxOpenConns)
	}
	return nil
}

// ClickHouse is the ClickHouse store: the full message history and the ack
// and membership event logs. It is a projection of the chat.* topics, so
// every write is idempotent: rows carry their Kafka identity in their
// ReplacingMergeTree key, and every read is exact while duplicates are not
// yet merged away. A *ClickHouse is safe for concurrent use.
type ClickHouse struct {
	conn driver.Conn
	cfg  ClickHouseConfig
}

// OpenClickHouse connects, creates the database if missing and applies the
// migrations.
func OpenClickHouse(ctx context.Context, cfg ClickHouseConfig) (*ClickHouse, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The database must exist before a connection can select it.
	admin, err := openConn(cfg, "")
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, cfg.QueryTimeout)
	err = admin.Exec(actx, "CREATE DATABASE IF NOT EXISTS `"+cfg.Database+"`")
	cancel()
	admin.Close()
	if err != nil {
		return nil, fmt.Errorf("clickhouse: create database %s: %w", cfg.Database, err)
	}
	conn, err := openConn(cfg, cfg.Database)
	if err != nil {
		return nil, err
	}
	c := &ClickHouse{conn: conn, cfg: cfg}
	if err := c.Migrate(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func openConn(cfg ClickHouseConfig, database string) (driver.Conn, error) {
	opts := &clickhouse.Options{
		Addr:         cfg.Addrs,
		Auth:         clickhouse.Auth{Database: database, Username: cfg.Username, Password: cfg.Password},
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.QueryTimeout,
		MaxOpenConns: cfg.MaxOpenConns,
		MaxIdleConns: cfg.MaxOpenConns, // a busy pool would otherwise close and dial connections again
		Compression:  &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	}
	if cfg.TLS != nil {
		// clickhouse-go's own TLS (Options.TLS) would keep the CAs read at start.
		dial := cfg.TLS.Dial((&net.Dialer{}).DialContext)
		opts.DialContext = func(ctx context.Context, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
			defer cancel()
			return dial(ctx, "tcp", addr)
		}
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: open: %w", err)
	}
	return conn, nil
}

// timeout bounds ctx by the query timeout.
func (c *ClickHouse) timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.QueryTimeout)
}

// eachRow runs query and calls scan for every row.
func (c *ClickHouse) eachRow(ctx context.Context, scan func(driver.Rows) error, query string, args ...any) error {
	defer c.cfg.Metrics.TimeStore("clickhouse", "query")()
	rows, err := c.conn.Query(ctx, query, args...)
	if err != nil {
		return hintSchemaLost(err) // a gateway's page of a lost table says what to do too
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return hintSchemaLost(rows.Err())
}

// Ping checks that the server answers.
func (c *ClickHouse) Ping(ctx context.Context) error {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	if err := c.conn.Ping(ctx); err != nil {
		return fmt.Errorf("clickhouse: ping: %w", err)
	}
	return nil
}

// Close closes the connections. Calls in flight fail.
func (c *ClickHouse) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("clickhouse: close: %w", err)
	}
	return nil
}

// AckRow is an ack event with the position of its chat.acks record.
type AckRow struct {
	schema.Ack
	Partition int32
	Offset    int64
}

// MemberRow is a membership event with the position of its chat.members
// record.
type MemberRow struct {
	schema.Member
	Partition int32
	Offset    int64
}

// sendBatch inserts one row per element of the column slices (all the same
// length) in one batch. query is "INSERT INTO t (a, b, ...)". A table or
// database that is gone fails with what to do (hintSchemaLost).
func (c *ClickHouse) sendBatch(ctx context.Context, query string, columns ...any) error {
	if f := strings.Fields(query); len(f) > 2 {
		defer c.cfg.Metrics.TimeStore("clickhouse", "insert "+f[2])()
	}
	batch, err := c.conn.PrepareBatch(ctx, query)
	if err != nil {
		return hintSchemaLost(err)
	}
	defer batch.Close()
	for i, col := range columns {
		if err := batch.Column(i).Append(col); err != nil {
			batch.Abort()
			return fmt.Errorf("column %d: %w", i, err)
		}
	}
	return hintSchemaLost(batch.Send())
}

func checkPosition(partition int32, offset int64) error {
	if partition < 0 || partition > 0xFFFF {
		return fmt.Errorf("partition %d out of range 0..65535", partition)
	}
	if offset < 0 {
		return fmt.Errorf("negative offset %d", offset)
	}
	return nil
}

// InsertMessages inserts msgs, all from one partition of chat.messages, in
// one batch. MsgID is the record offset. Inserting a message again is
// harmless.
func (c *ClickHouse) InsertMessages(ctx context.Context, partition int32, msgs []schema.Message) error {
	return c.insertMessages(ctx, len(msgs), func(i int) (*schema.Message, int32) { return &msgs[i], partition })
}

// MessageRow is a message with the partition of its chat.messages record
// (its MsgID is the record's offset).
type MessageRow struct {
	schema.Message
	Partition int32
}

// InsertMessageRows inserts rows, from any partitions, in one batch.
// Inserting a message again is harmless.
func (c *ClickHouse) InsertMessageRows(ctx context.Context, rows []MessageRow) error {
	return c.insertMessages(ctx, len(rows), func(i int) (*schema.Message, int32) { return &rows[i].Message, rows[i].Partition })
}

// insertMessages inserts the n messages that row returns, each with the
// partition of its record, in one batch: the columns are built straight
// from the caller's messages, with no copy of them between.
func (c *ClickHouse) insertMessages(ctx context.Context, n int, row func(i int) (*schema.Message, int32)) error {
	if n == 0 {
		return nil
	}
	gids, senders, clientIDs := make([]string, n), make([]string, n), make([]string, n)
	msgids, sentAts := make([]uint64, n), make([]int64, n)
	bodies, parts := make([][]byte, n), make([]uint16, n)
	for i := range n {
		m, part := row(i)
		if err := checkPosition(part, m.MsgID); err != nil {
			return fmt.Errorf("clickhouse: insert messages: message %d of %s: %w", i, m.Gid, err)
		}
		gids[i], msgids[i], senders[i], clientIDs[i] = m.Gid, uint64(m.MsgID), m.Sender, m.ClientMsgID
		sentAts[i], bodies[i], parts[i] = m.SentAt, m.Body, uint16(part)
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	err := c.sendBatch(ctx, "INSERT INTO messages (gid, msgid, sender, client_msg_id, sent_at_ms, body, `partition`)",
		gids, msgids, senders, clientIDs, sentAts, bodies, parts)
	if err != nil {
		return fmt.Errorf("clickhouse: insert messages: %w", err)
	}
	return nil
}

// NoJoin is member_events.joined of a row whose record names no join.
const NoJoin = -2

// InsertMembers appends rows to member_events, but for leavings
// (schema.OpLeaving), which change no membership. Inserting rows again is
// harmless.
func (c *ClickHouse) InsertMembers(ctx context.Context, rows []MemberRow) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	gids, uids, bys := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	ops, poss, ats, joineds := make([]int8, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	parts, offsets := make([]uint16, 0, n), make([]uint64, 0, n)
	for i := range rows {
		r := &rows[i]
		if err := checkPosition(r.Partition, r.Offset); err != nil {
			return fmt.Errorf("clickhouse: insert members: row %d: %w", i, err)
		}
		switch r.Op {
		case schema.OpLeaving:
			continue // announces a leave; changes no membership
		case schema.OpJoin, schema.OpLeave:
		default:
			return fmt.Errorf("clickhouse: insert members: row %d: unknown op %v", i, r.Op)
		}
		joined := int64(NoJoin)
		if r.HasJoined {
			joined = r.Joined
		}
		gids, uids, ops, poss, ats, bys = append(gids, r.Gid), append(uids, r.Uid), append(ops, int8(r.Op)), append(poss, r.Pos), append(ats, r.At), append(bys, r.By)
		joineds, parts, offsets = append(joineds, joined), append(parts, uint16(r.Partition)), append(offsets, uint64(r.Offset))
	}
	if len(gids) == 0 {
		return nil
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	err := c.sendBatch(ctx, "INSERT INTO member_events (gid, uid, op, pos, at_ms, `by`, `partition`, `offset`, joined)",
		gids, uids, ops, poss, ats, bys, parts, offsets, joineds)
	if err != nil {
		return fmt.Errorf("clickhouse: insert members: %w", err)
	}
	return nil
}

// AckCursors returns the delivery cursor (the largest acked upto) of every
// member of gid that has acked.
func (c *ClickHouse) AckCursors(ctx context.Context, gid string) (map[string]int64, error) {
	return c.cursors(ctx, "ack", "ack_cursors", gid)
}

// CountMessages returns the number of distinct messages stored for gid.
func (c *ClickHouse) CountMessages(ctx context.Context, gid string) (int64, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	var n uint64
	if err := c.conn.QueryRow(ctx, "SELECT uniqExact(msgid) FROM messages WHERE gid = ?", gid).Scan(&n); err != nil {
		return 0, fmt.Errorf("clickhouse: count messages of %s: %w", gid, err)
	}
	return int64(n), nil
}

// Query runs a read-only query for tests and tools. ctx alone bounds it
// (the rows outlive the call); args bind to "?" placeholders. Never pass an
// INSERT with arguments: clickhouse-go hangs on those against old servers.
func (c *ClickHouse) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	rows, err := c.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: query: %w", err)
	}
	return rows, nil
}
