package store

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/groupchat/chatd/schema"
)

// ReceiptRow is a receipt event with the position of its chat.receipts
// record.
type ReceiptRow struct {
	schema.Receipt
	Partition int32
	Offset    int64
}

// InsertReceipts appends rows to receipt_events and moves the cursors in
// read_cursors (which keep the largest upto), as InsertAcks does for acks.
// Inserting rows again is harmless; if only the first of the two inserts
// succeeds, retrying the call repairs it.
func (c *ClickHouse) InsertReceipts(ctx context.Context, rows []ReceiptRow) error {
	cr := make([]cursorRow, len(rows))
	for i, r := range rows {
		cr[i] = cursorRow{r.Gid, r.Uid, r.Upto, r.At, r.Partition, r.Offset}
	}
	return c.insertCursors(ctx, "receipts", "receipt_events", "read_cursors", cr)
}

// ReadCursors returns the read cursor (the largest upto read) of every
// member of gid that has sent a receipt. It is exact before merges: max
// ignores both replayed copies and older cursors.
//
// Unlike Redis's read set, it holds receipts only: a join does not raise
// it to the join position. Read counts do not depend on that, since a
// member counts only for messages sent after they joined.
func (c *ClickHouse) ReadCursors(ctx context.Context, gid string) (map[string]int64, error) {
	return c.cursors(ctx, "read", "read_cursors", gid)
}

// eventTables are the event logs that DropEventsBefore prunes: the ack and
// receipt logs, partitioned by the UTC month of their at_ms. Messages keep
// their own retention; membership and cursors are kept whole.
var eventTables = []string{"ack_events", "receipt_events"}

// monthPartition is the partition ID of toYYYYMM.
var monthPartition = regexp.MustCompile(`^[0-9]{6}$`)

// DropEventsBefore drops every monthly partition of ack_events and
// receipt_events that lies wholly before before (its UTC month ends at or
// before it), and returns them as "table/YYYYMM", in order. Events of the
// month that holds before are kept. Read counts come from read_cursors,
// but for a member who left, came back and read again: the reads of their
// earlier stretches are in receipt_events alone, and go with its months
// (docs/analytics.md). Time-to-read and delivery latency of the dropped
// months are gone. Dropping is idempotent, so a retention job may run it
// at any time, and on a partly failed run again.
//
// A server refuses to drop a partition larger than its
// max_partition_size_to_drop (50 GB by default).
func (c *ClickHouse) DropEventsBefore(ctx context.Context, before time.Time) (dropped []string, err error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	type part struct{ table, id string }
	var parts []part
	err = c.eachRow(ctx, func(rows driver.Rows) error {
		var p part
		err := rows.Scan(&p.table, &p.id)
		parts = append(parts, p)
		return err
	}, "SELECT DISTINCT table, partition_id FROM system.parts "+
		"WHERE database = currentDatabase() AND active AND table IN (?, ?)", eventTables[0], eventTables[1])
	if err != nil {
		return nil, fmt.Errorf("clickhouse: drop events before %v: list partitions: %w", before, err)
	}
	sort.Slice(parts, func(i, j int) bool {
		if parts[i].table != parts[j].table {
			return parts[i].table < parts[j].table
		}
		return parts[i].id < parts[j].id
	})
	before = before.UTC()
	for _, p := range parts {
		end, err := monthEnd(p.id)
		if err != nil {
			return dropped, fmt.Errorf("clickhouse: drop events before %v: %s: %w", before, p.table, err)
		}
		if end.After(before) {
			continue
		}
		// An ID, not a value: checked to be six digits above, so it is safe
		// to splice, and ALTER takes no bound arguments.
		if err := c.conn.Exec(ctx, "ALTER TABLE "+p.table+" DROP PARTITION ID '"+p.id+"'"); err != nil {
			return dropped, fmt.Errorf("clickhouse: drop events before %v: %s partition %s: %w", before, p.table, p.id, err)
		}
		dropped = append(dropped, p.table+"/"+p.id)
	}
	return dropped, nil
}

// monthEnd returns the start of the UTC month after partition id YYYYMM.
func monthEnd(id string) (time.Time, error) {
	if !monthPartition.MatchString(id) {
		return time.Time{}, fmt.Errorf("partition %q is not a month (YYYYMM)", id)
	}
	ym, _ := strconv.Atoi(id)
	y, m := ym/100, ym%100
	if m < 1 || m > 12 {
		return time.Time{}, fmt.Errorf("partition %q is not a month (YYYYMM)", id)
	}
	return time.Date(y, time.Month(m)+1, 1, 0, 0, 0, 0, time.UTC), nil
}
