package producers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// What IsMessageOf keeps of each partition of chat.messages: the keys of
// the newest keyBatches batches it fetched, at most keyRecords keys in
// all, and of the last batch it fetched. The online members of a group ask
// about the same few newest batches (those the persister has not stored
// yet); a member may name any msgid of the partition, and those asks push
// out the oldest first.
const (
	keyBatches = 16
	keyRecords = 1 << 14
)

// partKeys is what IsMessageOf knows of a partition of chat.messages.
type partKeys struct {
	batches []keyBatch // by offset, lowest first; none overlap
	last    keyBatch   // the last fetched, also when older than all of batches
	records int        // keys held, all batches together
	start   int64      // the log's start as last read: retention deleted what lies below
	bounded time.Time  // when the log's bounds were last read (outOfRange)
}

// keyBatch is the keys of a run of records fetched: an offset from first
// to last without a key is no record.
type keyBatch struct {
	first, last int64
	keys        map[int64]string
}

// lookup returns the key of the record at offset (ok false: no record
// there), and whether k knows it.
func (k *partKeys) lookup(offset int64) (key string, ok, known bool) {
	if k == nil {
		return "", false, false
	}
	if offset < k.start {
		return "", false, true
	}
	for _, b := range k.batches {
		if b.holds(offset) {
			key, ok = b.keys[offset]
			return key, ok, true
		}
	}
	if k.last.holds(offset) {
		key, ok = k.last.keys[offset]
		return key, ok, true
	}
	return "", false, false
}

func (b *keyBatch) holds(offset int64) bool {
	return b.keys != nil && b.first <= offset && offset <= b.last
}

// add keeps b, and lets the lowest batches go past keyBatches and
// keyRecords (b itself, when it is the lowest: then it stays as last).
func (k *partKeys) add(b keyBatch) {
	k.last = b
	i := 0
	for ; i < len(k.batches) && k.batches[i].first < b.first; i++ {
	}
	if i > 0 && k.batches[i-1].last >= b.first || i < len(k.batches) && k.batches[i].first <= b.last {
		return // another ask fetched it meanwhile
	}
	k.batches = slices.Insert(k.batches, i, b)
	k.records += len(b.keys)
	for len(k.batches) > keyBatches || k.records > keyRecords {
		k.records -= len(k.batches[0].keys)
		k.batches = slices.Delete(k.batches, 0, 1)
	}
}

// partKeys returns what IsMessageOf knows of partition part; p.mu held.
func (p *Producer) partKeys(part int) *partKeys {
	k := p.keys[part]
	if k == nil {
		k = &partKeys{}
		p.keys[part] = k
	}
	return k
}

// IsMessageOf reports whether the record at offset msgid of gid's partition
// of chat.messages is a message of gid (its key is gid): the msgids of the
// other groups of the partition lie between gid's, and below its head.
// It fetches the batch holding that one record, and keeps the keys of the
// newest batches fetched of each partition (see keyBatches): gateways ask
// only for a cursor above the group's head in Redis, which lags the log by
// the persister's delay, and then each online member of the group asks for
// the same msgids.
//
// A record outside the log when fetched is no message of gid that a
// member can have: below the log's start, retention deleted it; past its
// end, it was not written when the member asked (or was lost with the
// log's tail). The log's bounds are then read (see outOfRange).
func (p *Producer) IsMessageOf(ctx context.Context, gid string, msgid int64) (bool, error) {
	part, err := p.Partition(ctx, topics.Messages, gid)
	if err != nil {
		return false, err
	}
	want := string(schema.MessageKey(gid))
	p.mu.Lock()
	key, ok, known := p.keys[part].lookup(msgid)
	p.mu.Unlock()
	if known {
		return ok && key == want, nil
	}
	b, err := p.fetchKeys(ctx, part, msgid)
	if errors.Is(err, kafka.OffsetOutOfRange) {
		p.outOfRange(ctx, part)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(b.keys) > 0 && b.last >= msgid {
		p.mu.Lock()
		p.partKeys(part).add(b)
		p.mu.Unlock()
	}
	key, ok = b.keys[msgid]
	return ok && key == want, nil // not there: not in the log (yet)
}

// outOfRange reads the bounds of partition part of chat.messages, where
// a fetch found no record in range: the start, below which IsMessageOf
// then answers without a fetch, and the end, which corrects a head known
// from a log that has gone back since (see appended). It reads them at
// most once every headGap: asks past them may come with every frame.
func (p *Producer) outOfRange(ctx context.Context, part int) {
	p.mu.Lock()
	k := p.partKeys(part)
	if time.Since(k.bounded) < headGap {
		p.mu.Unlock()
		return
	}
	k.bounded = time.Now()
	p.mu.Unlock()
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		topics.Messages: {kafka.FirstOffsetOf(part), kafka.LastOffsetOf(part)}}}
	var resp *kafka.ListOffsetsResponse
	if err := p.again(func() (err error) { resp, err = p.client.ListOffsets(ctx, req); return err }); err != nil {
		return // the next ask out of range reads them
	}
	for _, po := range resp.Topics[topics.Messages] {
		if po.Partition != part || po.Error != nil {
			continue
		}
		p.brokerHead(part, po.LastOffset-1) // may drop what was known of the partition: first
		p.mu.Lock()
		k := p.partKeys(part)
		k.start = max(k.start, po.FirstOffset)
		p.mu.Unlock()
	}
}

// fetchKeys returns the keys, by offset, of the batch of chat.messages'
// partition part that holds offset.
func (p *Producer) fetchKeys(ctx context.Context, part int, offset int64) (keyBatch, error) {
	// The broker answers with the whole batch holding offset however low
	// MaxBytes is, and with nothing past it.
	req := &kafka.FetchRequest{Topic: topics.Messages, Partition: part, Offset: offset, MinBytes: 1, MaxBytes: 1, MaxWait: time.Second}
	var resp *kafka.FetchResponse
	err := p.again(func() (err error) {
		if resp, err = p.client.Fetch(ctx, req); err == nil {
			err = resp.Error
		}
		return err
	})
	if err != nil {
		return keyBatch{}, fmt.Errorf("producers: record %d of %s/%d: %w", offset, topics.Messages, part, err)
	}
	b := keyBatch{first: offset, last: -1, keys: map[int64]string{}}
	for {
		rec, err := resp.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return keyBatch{}, fmt.Errorf("producers: record %d of %s/%d: %w", offset, topics.Messages, part, err)
		}
		key, err := protocol.ReadAll(rec.Key)
		for _, x := range []protocol.Bytes{rec.Key, rec.Value} {
			if x != nil {
				x.Close()
			}
		}
		if err != nil {
			return keyBatch{}, fmt.Errorf("producers: key of record %d of %s/%d: %w", rec.Offset, topics.Messages, part, err)
		}
		b.keys[rec.Offset] = string(key)
		b.first, b.last = min(b.first, rec.Offset), max(b.last, rec.Offset)
	}
}
