package store

import (
	"context"
	"fmt"
	"slices"

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
	// As Messages, newest first.
	msgs, err := c.queryMessages(ctx, gid, "PREWHERE gid = ? AND msgid >= ? AND msgid < ? GROUP BY msgid ORDER BY msgid DESC LIMIT ?",
		gid, firstAfter(after), uint64(before), limit)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: messages of %s before %d: %w", gid, before, err)
	}
	slices.Reverse(msgs)
	return msgs, nil
}
