package store

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/groupchat/chatd/schema"
)

// Messages returns up to limit messages of gid with after < msgid <= upto,
// in msgid order: a contiguous run of the group's stored history. Each
// message appears once, however often it was inserted.
func (c *ClickHouse) Messages(ctx context.Context, gid string, after, upto int64, limit int) ([]schema.Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("clickhouse: messages: limit %d, want > 0", limit)
	}
	if upto <= after || upto < 0 {
		return nil, nil
	}
	msgs, rows, err := c.queryMessages(ctx, gid, false, "msgid >= ? AND msgid <= ? ORDER BY msgid LIMIT ?",
		firstAfter(after), uint64(upto), limit)
	if n := len(msgs); err == nil && n < limit && rows >= limit {
		// Copies of a replay took places in the pick. It holds every copy
		// of the messages below its last, so the rest follows that one.
		var rest []schema.Message
		rest, _, err = c.queryMessages(ctx, gid, true, "msgid > ? AND msgid <= ? ORDER BY msgid LIMIT ?",
			uint64(msgs[n-1].MsgID), uint64(upto), limit-n)
		msgs = append(msgs, rest...)
	}
	if err != nil {
		return nil, fmt.Errorf("clickhouse: messages of %s: %w", gid, err)
	}
	return msgs, nil
}

// MessagesBefore returns the newest messages of gid with after < msgid <
// before, at most limit, in msgid order: a contiguous run of the group's
// stored history that ends right before `before`. Each message appears
// once, however often it was inserted.
func (c *ClickHouse) MessagesBefore(ctx context.Context, gid string, after, before int64, limit int) ([]schema.Message, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("clickhouse: messages: limit %d, want > 0", limit)
	}
	if before <= 0 || before <= after+1 {
		return nil, nil
	}
	// As Messages, newest first.
	msgs, rows, err := c.queryMessages(ctx, gid, false, "msgid >= ? AND msgid < ? ORDER BY msgid DESC LIMIT ?",
		firstAfter(after), uint64(before), limit)
	if n := len(msgs); err == nil && n < limit && rows >= limit {
		var rest []schema.Message
		rest, _, err = c.queryMessages(ctx, gid, true, "msgid >= ? AND msgid < ? ORDER BY msgid DESC LIMIT ?",
			firstAfter(after), uint64(msgs[0].MsgID), limit-n)
		msgs = append(rest, msgs...)
	}
	if err != nil {
		return nil, fmt.Errorf("clickhouse: messages of %s before %d: %w", gid, before, err)
	}
	return msgs, nil
}

// queryMessages returns the messages of gid whose msgids a pick query
// selects, in msgid order, and how many rows (copies included) hold them.
// tail completes "SELECT msgid FROM messages PREWHERE gid = ? AND " with a
// range, ORDER BY and LIMIT; args bind its placeholders. distinct picks
// distinct msgids instead of rows.
//
// The page is picked from the key columns alone and only its rows are read
// in full: folding the whole range before the LIMIT, as GROUP BY msgid ...
// LIMIT does, reads every body in it, so a page of 1,000 deep in 200,000
// messages took 50 times as long as one near the end. 18.16 cannot stop a
// scan in key order early, so the pick still reads the range's msgids;
// picking rows (a top-n sort) costs a third of picking distinct msgids (a
// hash of them all), and when copies took places in the pick the caller
// picks the rest distinct. The IN set is served by the primary key, so the
// outer query reads the page's granules only. GROUP BY msgid there
// collapses replayed copies exactly (they are identical) and is about 4x
// faster than FINAL on 18.16; PREWHERE and two threads take another fifth
// off.
func (c *ClickHouse) queryMessages(ctx context.Context, gid string, distinct bool, tail string, args ...any) ([]schema.Message, int, error) {
	pick := "msgid"
	if distinct {
		pick = "DISTINCT msgid"
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	var msgs []schema.Message
	var rows int
	err := c.eachRow(ctx, func(r driver.Rows) error {
		var (
			msgid, copies uint64
			body          string // a string, not []byte: the driver would alias its buffer
		)
		m := schema.Message{Gid: gid}
		if err := r.Scan(&msgid, &m.Sender, &m.ClientMsgID, &m.SentAt, &body, &copies); err != nil {
			return err
		}
		m.MsgID, m.Body = int64(msgid), []byte(body)
		msgs, rows = append(msgs, m), rows+int(copies)
		return nil
	}, "SELECT msgid, any(sender), any(client_msg_id), any(sent_at_ms), any(body), count() FROM messages "+
		"PREWHERE gid = ? AND msgid IN (SELECT "+pick+" FROM messages PREWHERE gid = ? AND "+tail+") "+
		"GROUP BY msgid ORDER BY msgid SETTINGS max_threads = 2", append([]any{gid, gid}, args...)...)
	return msgs, rows, err
}

// firstAfter is the lowest msgid above after, as ClickHouse stores msgids.
func firstAfter(after int64) uint64 {
	if after < 0 {
		return 0
	}
	return uint64(after) + 1
}
