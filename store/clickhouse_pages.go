package store

import (
	"context"
	"fmt"
	"math"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/groupchat/chatd/schema"
)

// Messages returns up to limit messages of gid with after < msgid <= upto,
// in msgid order: a contiguous run of the group's stored history. Each
// message appears once, however often it was inserted.
func (c *ClickHouse) Messages(ctx context.Context, gid string, after, upto int64, limit int) ([]schema.Message, error) {
	msgs, _, err := c.MessagesWithin(ctx, gid, after, upto, limit, 0)
	return msgs, err
}

// MessagesWithin is Messages with a byte budget: with maxBytes > 0 it stops
// before the bodies would pass maxBytes, after one message at least, and
// says so (cut): more messages of the range follow. What it reads of the
// bodies stays within about twice maxBytes, however large the messages
// (see pickPage), as the Redis window's reads do (see Redis.Window).
func (c *ClickHouse) MessagesWithin(ctx context.Context, gid string, after, upto int64, limit, maxBytes int) (msgs []schema.Message, cut bool, err error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("clickhouse: messages: limit %d, want > 0", limit)
	}
	if upto <= after || upto < 0 {
		return nil, false, nil
	}
	share := bodyShare(maxBytes, limit)
	p, err := c.pickPage(ctx, gid, false, share, "msgid >= ? AND msgid <= ? ORDER BY msgid LIMIT ?",
		firstAfter(after), uint64(upto), limit)
	if n := len(p.msgs); err == nil && n < limit && p.rows >= limit {
		// Copies of a replay took places in the pick. It holds every copy
		// of the messages below its last, so the rest follows that one.
		var rest page
		rest, err = c.pickPage(ctx, gid, true, share, "msgid > ? AND msgid <= ? ORDER BY msgid LIMIT ?",
			uint64(p.msgs[n-1].MsgID), uint64(upto), limit-n)
		p.msgs, p.sizes = append(p.msgs, rest.msgs...), append(p.sizes, rest.sizes...)
	}
	if err == nil {
		n := fit(p.sizes, maxBytes, false)
		cut = n < len(p.msgs)
		p.msgs, p.sizes = p.msgs[:n], p.sizes[:n]
		err = c.readBodies(ctx, gid, share, p)
	}
	if err != nil {
		return nil, false, fmt.Errorf("clickhouse: messages of %s: %w", gid, err)
	}
	return p.msgs, cut, nil
}

// MessagesBefore returns the newest messages of gid with after < msgid <
// before, at most limit, in msgid order: a contiguous run of the group's
// stored history that ends right before `before`. Each message appears
// once, however often it was inserted.
func (c *ClickHouse) MessagesBefore(ctx context.Context, gid string, after, before int64, limit int) ([]schema.Message, error) {
	msgs, _, err := c.MessagesBeforeWithin(ctx, gid, after, before, limit, 0)
	return msgs, err
}

// MessagesBeforeWithin is MessagesBefore with a byte budget, as
// MessagesWithin has; it keeps the newest messages, and when cut, more
// messages of the range precede them.
func (c *ClickHouse) MessagesBeforeWithin(ctx context.Context, gid string, after, before int64, limit, maxBytes int) (msgs []schema.Message, cut bool, err error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("clickhouse: messages: limit %d, want > 0", limit)
	}
	if before <= 0 || before <= after+1 {
		return nil, false, nil
	}
	// As MessagesWithin, newest first.
	share := bodyShare(maxBytes, limit)
	p, err := c.pickPage(ctx, gid, false, share, "msgid >= ? AND msgid < ? ORDER BY msgid DESC LIMIT ?",
		firstAfter(after), uint64(before), limit)
	if n := len(p.msgs); err == nil && n < limit && p.rows >= limit {
		var rest page
		rest, err = c.pickPage(ctx, gid, true, share, "msgid >= ? AND msgid < ? ORDER BY msgid DESC LIMIT ?",
			firstAfter(after), uint64(p.msgs[0].MsgID), limit-n)
		p.msgs, p.sizes = append(rest.msgs, p.msgs...), append(rest.sizes, p.sizes...)
	}
	if err == nil {
		n := fit(p.sizes, maxBytes, true)
		cut = n < len(p.msgs)
		p.msgs, p.sizes = p.msgs[len(p.msgs)-n:], p.sizes[len(p.sizes)-n:]
		err = c.readBodies(ctx, gid, share, p)
	}
	if err != nil {
		return nil, false, fmt.Errorf("clickhouse: messages of %s before %d: %w", gid, before, err)
	}
	return p.msgs, cut, nil
}

// page is what pickPage finds: messages in msgid order, the size of each
// one's body (left out where it is over the share), and how many rows,
// copies included, hold them.
type page struct {
	msgs  []schema.Message
	sizes []int
	rows  int
}

// bodyShare is the largest body that pickPage reads with the page: a page
// of limit such bodies reads maxBytes. No share (maxBytes <= 0) reads all.
func bodyShare(maxBytes, limit int) uint64 {
	if maxBytes <= 0 {
		return math.MaxUint64
	}
	return uint64(maxBytes / limit)
}

// pickPage returns the messages of gid whose msgids a pick query selects,
// with their bodies where they are at most share bytes. tail completes
// "SELECT msgid FROM messages PREWHERE gid = ? AND " with a range, ORDER
// BY and LIMIT; args bind its placeholders. distinct picks distinct msgids
// instead of rows.
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
//
// The bodies over the share stay on the server (anyIf does not even copy
// them, which took 60 of 110 ms of a page of 16 KiB bodies): the bodies
// sent are at most a page of shares, and the page of usual messages still
// costs one query. The caller cuts the page to its budget by the sizes and
// reads the large bodies it keeps with readBodies (18.16 has no running
// sum to cut it on the server, and a cut there cost a page twice as much).
func (c *ClickHouse) pickPage(ctx context.Context, gid string, distinct bool, share uint64, tail string, args ...any) (page, error) {
	pick := "msgid"
	if distinct {
		pick = "DISTINCT msgid"
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	var p page
	err := c.eachRow(ctx, func(r driver.Rows) error {
		var (
			msgid, size, copies uint64
			body                string // a string, not []byte: the driver would alias its buffer
		)
		m := schema.Message{Gid: gid}
		if err := r.Scan(&msgid, &m.Sender, &m.ClientMsgID, &m.SentAt, &size, &body, &copies); err != nil {
			return err
		}
		m.MsgID, m.Body = int64(msgid), []byte(body)
		p.msgs, p.sizes, p.rows = append(p.msgs, m), append(p.sizes, int(size)), p.rows+int(copies)
		return nil
	}, "SELECT msgid, any(sender), any(client_msg_id), any(sent_at_ms), any(length(body)), "+
		"anyIf(body, length(body) <= ?), count() FROM messages "+
		"PREWHERE gid = ? AND msgid IN (SELECT "+pick+" FROM messages PREWHERE gid = ? AND "+tail+") "+
		"GROUP BY msgid ORDER BY msgid SETTINGS max_threads = 2", append([]any{share, gid, gid}, args...)...)
	return p, err
}

// readBodies reads the bodies of p's messages that pickPage left out, by
// their msgids (the primary key serves the set).
func (c *ClickHouse) readBodies(ctx context.Context, gid string, share uint64, p page) error {
	at := make(map[uint64]int)
	set := clickhouse.GroupSet{}
	for i, size := range p.sizes {
		if uint64(size) > share {
			at[uint64(p.msgs[i].MsgID)] = i
			set.Value = append(set.Value, uint64(p.msgs[i].MsgID))
		}
	}
	if len(at) == 0 {
		return nil
	}
	ctx, cancel := c.timeout(ctx)
	defer cancel()
	err := c.eachRow(ctx, func(r driver.Rows) error {
		var (
			msgid uint64
			body  string
		)
		if err := r.Scan(&msgid, &body); err != nil {
			return err
		}
		if i, ok := at[msgid]; ok {
			p.msgs[i].Body = []byte(body)
			delete(at, msgid)
		}
		return nil
	}, "SELECT msgid, any(body) FROM messages PREWHERE gid = ? AND msgid IN ? GROUP BY msgid SETTINGS max_threads = 2", gid, set)
	if err == nil && len(at) > 0 {
		err = fmt.Errorf("%d bodies vanished between two reads (a partition dropped?)", len(at))
	}
	return err
}

// fit returns how many of sizes fit in maxBytes, counted from the start
// (from the end with fromEnd): one at least, and all with maxBytes <= 0.
func fit(sizes []int, maxBytes int, fromEnd bool) int {
	if maxBytes <= 0 {
		return len(sizes)
	}
	total := 0
	for i := range sizes {
		j := i
		if fromEnd {
			j = len(sizes) - 1 - i
		}
		if total += sizes[j]; total > maxBytes && i > 0 {
			return i
		}
	}
	return len(sizes)
}

// firstAfter is the lowest msgid above after, as ClickHouse stores msgids.
func firstAfter(after int64) uint64 {
	if after < 0 {
		return 0
	}
	return uint64(after) + 1
}
