package store

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// InsertAcks appends rows to ack_events and moves the cursors in
// ack_cursors (which keep the largest upto). Inserting rows again is
// harmless; if only the first of the two inserts succeeds, retrying the
// call repairs it.
func (c *ClickHouse) InsertAcks(ctx context.Context, rows []AckRow) error {
	cr := make([]cursorRow, len(rows))
	for i, r := range rows {
		cr[i] = cursorRow{r.Gid, r.Uid, r.Upto, r.At, r.Partition, r.Offset}
	}
	return c.insertCursors(ctx, "acks", "ack_events", "ack_cursors", cr)
}

// cursorRow is an ack or a receipt event with its record's position.
type cursorRow struct {
	gid, uid  string
	upto, at  int64
	partition int32
	offset    int64
}

// insertCursors appends rows to an event table and moves the cursors of a
// cursor table (ReplacingMergeTree(upto): the largest upto wins), one row
// per member per call, in order of first appearance.
func (c *ClickHouse) insertCursors(ctx context.Context, what, events, cursors string, rows []cursorRow) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	gids, uids := make([]string, n), make([]string, n)
	uptos, ats, offsets := make([]int64, n), make([]int64, n), make([]uint64, n)
	parts := make([]uint16, n)
	type key struct{ gid, uid string }
	newest := make(map[key]int) // index of the largest upto per member
	var order []key             // first appearance, so the batch is deterministic
	for i := range rows {
		r := &rows[i]
		if err := checkPosition(r.partition, r.offset); err != nil {
			return fmt.Errorf("clickhouse: insert %s: row %d: %w", what, i, err)
		}
		gids[i], uids[i], uptos[i], ats[i] = r.gid, r.uid, r.upto, r.at
		parts[i], offsets[i] = uint16(r.partition), uint64(r.offset)
		k := key{r.gid, r.uid}
		j, ok := newest[k]
		if !ok {
			order = append(order, k)
		}
		if !ok || r.upto > rows[j].upto {
			newest[k] = i
		}
	}
	cg, cu := make([]string, len(order)), make([]string, len(order))
	cupto, cat := make([]int64, len(order)), make([]int64, len(order))
	for j, k := range order {
		i := newest[k]
		cg[j], cu[j], cupto[j], cat[j] = rows[i].gid, rows[i].uid, rows[i].upto, rows[i].at
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	err := c.sendBatch(ctx, "INSERT INTO "+events+" (gid, uid, upto, at_ms, `partition`, `offset`)",
		gids, uids, uptos, ats, parts, offsets)
	if err != nil {
		return fmt.Errorf("clickhouse: insert %s: %s: %w", what, events, err)
	}
	err = c.sendBatch(ctx, "INSERT INTO "+cursors+" (gid, uid, upto, updated_at_ms)", cg, cu, cupto, cat)
	if err != nil {
		return fmt.Errorf("clickhouse: insert %s: %s: %w", what, cursors, err)
	}
	return nil
}

// cursors returns every member's cursor of gid from a cursor table, exact
// under duplicate rows (max ignores replayed copies and older cursors).
func (c *ClickHouse) cursors(ctx context.Context, what, table, gid string) (map[string]int64, error) {
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	out := make(map[string]int64)
	err := c.eachRow(ctx, func(rows driver.Rows) error {
		var (
			uid  string
			upto int64
		)
		err := rows.Scan(&uid, &upto)
		out[uid] = upto
		return err
	}, "SELECT uid, max(upto) FROM "+table+" WHERE gid = ? GROUP BY uid", gid)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %s cursors of %s: %w", what, gid, err)
	}
	return out, nil
}
