package store

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/groupchat/chatd/schema"
)

// SentBefore returns, of the messages stored in partition part with msgid <
// before and sent_at_ms >= since, those whose client_msg_id is one of
// cmids; the body is left out. A backfill asks it for the originals of
// resends whose first send retention has already removed from the topic.
func (c *ClickHouse) SentBefore(ctx context.Context, part int32, before, since int64, cmids []string) ([]schema.Message, error) {
	if len(cmids) == 0 || before <= 0 {
		return nil, nil
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	var out []schema.Message
	err := c.eachRow(ctx, func(rows driver.Rows) error {
		var m schema.Message
		var msgid uint64
		if err := rows.Scan(&m.Gid, &m.Sender, &m.ClientMsgID, &msgid, &m.SentAt); err != nil {
			return err
		}
		m.MsgID = int64(msgid)
		out = append(out, m)
		return nil
	}, "SELECT gid, sender, client_msg_id, msgid, any(sent_at_ms) FROM messages "+
		"PREWHERE `partition` = ? AND msgid < ? AND sent_at_ms >= ? WHERE has(?, client_msg_id) "+
		"GROUP BY gid, sender, client_msg_id, msgid", uint16(part), uint64(before), since, cmids)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: messages of partition %d sent before %d: %w", part, before, err)
	}
	return out, nil
}

// NewestBefore returns, of each group in gids, its newest msgid below
// before that is stored; groups with none are absent. The persister asks it
// for the floor of a group whose older messages the topic no longer holds
// (retention removed them) when the window is rebuilt without them.
func (c *ClickHouse) NewestBefore(ctx context.Context, gids []string, before int64) (map[string]int64, error) {
	out := make(map[string]int64)
	if len(gids) == 0 || before <= 0 {
		return out, nil
	}
	for i := 0; i < len(gids); i += lookupChunk {
		if err := c.newestBefore(ctx, gids[i:min(i+lookupChunk, len(gids))], before, out); err != nil {
			return nil, fmt.Errorf("clickhouse: newest messages of %d groups before %d: %w", len(gids), before, err)
		}
	}
	return out, nil
}

// newestBefore is NewestBefore of at most lookupChunk groups, so that the
// query stays under ClickHouse's max_query_size: a replay's batch may meet
// ten thousand groups.
func (c *ClickHouse) newestBefore(ctx context.Context, gids []string, before int64, out map[string]int64) error {
	set := clickhouse.GroupSet{Value: make([]any, len(gids))}
	for i, gid := range gids {
		set.Value[i] = gid
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	return c.eachRow(ctx, func(rows driver.Rows) error {
		var gid string
		var msgid uint64
		if err := rows.Scan(&gid, &msgid); err != nil {
			return err
		}
		out[gid] = int64(msgid)
		return nil
	}, "SELECT gid, max(msgid) FROM messages PREWHERE gid IN ? AND msgid < ? GROUP BY gid", set, uint64(before))
}

// lookupChunk is how many client_msg_ids one SentBefore names, and group
// ids one newestBefore: the query stays under ClickHouse's default
// max_query_size (256 KiB) with ids of the longest allowed size.
const lookupChunk = 1000

// FirstSendsBefore returns the first sends, stored in partition part below
// offset start, of the messages in msgs that may be resends of them: a
// replay or backfill that began at start (retention removed what came
// before) meets resends whose first send it never sees. Only messages sent
// within win ms of first (the sent_at of the record at start) can be such
// resends; the others cost no query.
func (c *ClickHouse) FirstSendsBefore(ctx context.Context, part int32, start, first, win int64, msgs []schema.Message) ([]schema.Message, error) {
	var cmids []string
	for i := range msgs {
		if msgs[i].ClientMsgID != "" && msgs[i].SentAt <= first+win {
			cmids = append(cmids, msgs[i].ClientMsgID)
		}
	}
	var out []schema.Message
	for i := 0; i < len(cmids); i += lookupChunk {
		found, err := c.SentBefore(ctx, part, start, first-win, cmids[i:min(i+lookupChunk, len(cmids))])
		if err != nil {
			return nil, fmt.Errorf("look up the first sends of resends: %w", err)
		}
		out = append(out, found...)
	}
	return out, nil
}

// seedChunk is how many groups NewestOfPartition hands over at a time.
const seedChunk = 1000

// NewestOfPartition calls each with the newest stored msgid of every
// group of partition part that has messages below before, a chunk of
// groups at a time, so that a partition of millions of groups needs no
// map of them all. The persister seeds the windows of groups silent since
// before a replay's origin with it (see Redis.SeedWindows).
func (c *ClickHouse) NewestOfPartition(ctx context.Context, part int32, before int64, each func(map[string]int64) error) error {
	if before <= 0 {
		return nil
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	chunk := make(map[string]int64, seedChunk)
	err := c.eachRow(ctx, func(rows driver.Rows) error {
		var gid string
		var msgid uint64
		if err := rows.Scan(&gid, &msgid); err != nil {
			return err
		}
		chunk[gid] = int64(msgid)
		if len(chunk) < seedChunk {
			return nil
		}
		err := each(chunk)
		clear(chunk)
		return err
	}, "SELECT gid, max(msgid) FROM messages PREWHERE `partition` = ? AND msgid < ? GROUP BY gid", uint16(part), uint64(before))
	if err == nil && len(chunk) > 0 {
		err = each(chunk)
	}
	if err != nil {
		return fmt.Errorf("clickhouse: newest messages of the groups of partition %d before %d: %w", part, before, err)
	}
	return nil
}
