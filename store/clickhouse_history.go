package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/groupchat/chatd/schema"
)

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
	from := uint64(0)
	if after >= 0 {
		from = uint64(after) + 1
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	var msgs []schema.Message
	err := c.eachRow(ctx, func(rows driver.Rows) error {
		var (
			msgid uint64
			body  string // a string, not []byte: the driver would alias its buffer
		)
		m := schema.Message{Gid: gid}
		if err := rows.Scan(&msgid, &m.Sender, &m.ClientMsgID, &m.SentAt, &body); err != nil {
			return err
		}
		m.MsgID, m.Body = int64(msgid), []byte(body)
		msgs = append(msgs, m)
		return nil
	}, // as Messages, newest first
		"SELECT msgid, any(sender), any(client_msg_id), any(sent_at_ms), any(body) FROM messages "+
			"PREWHERE gid = ? AND msgid >= ? AND msgid < ? GROUP BY msgid ORDER BY msgid DESC LIMIT ? SETTINGS max_threads = 2",
		gid, from, uint64(before), limit)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: messages of %s before %d: %w", gid, before, err)
	}
	slices.Reverse(msgs)
	return msgs, nil
}
