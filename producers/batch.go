package producers

import (
	"encoding/binary"
	"hash/crc32"
	"time"

	"github.com/segmentio/kafka-go"
)

// A record batch (Kafka's message format v2) of an idempotent producer:
// kafka-go writes producer id -1 into the batches it encodes, so a lane
// encodes its own. With the producer id, epoch and base sequence in the
// batch, the broker keeps a request it already appended from being
// appended again when it is retried (it answers with the first offsets),
// and refuses one from an epoch the lane has left behind.
//
//	baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (2)
//	crc uint32 (CRC-32C of what follows) | attributes int16 | lastOffsetDelta int32
//	firstTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16
//	baseSequence int32 | records int32 | the records
//
// A record: length varint | attributes int8 | timestampDelta varint |
// offsetDelta varint | key (varint length, -1 for none) | value (the same) |
// header count varint | headers (key, value as above).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// identity is a lane's place in the idempotent producer protocol.
type identity struct {
	pid   int64
	epoch int16
	seq   int32 // the base sequence of the lane's next batch
}

// encodeBatch encodes msgs as one batch of id, starting at id.seq, as a
// produce request carries it: its size (int32), then the batch.
func encodeBatch(msgs []kafka.Message, id identity) []byte {
	now := time.Now().UnixMilli()
	first, last := now, now
	for i, m := range msgs {
		t := now
		if !m.Time.IsZero() {
			t = m.Time.UnixMilli()
		}
		if i == 0 {
			first, last = t, t
		}
		last = max(last, t)
	}
	const at = 4 // the batch starts after the size
	b := make([]byte, at+61, at+61+len(msgs)*64)
	h := b[at:]
	binary.BigEndian.PutUint64(h[0:], 0)                    // base offset: the broker's
	binary.BigEndian.PutUint32(h[12:], 0xffffffff)          // partition leader epoch: -1
	h[16] = 2                                               // magic
	binary.BigEndian.PutUint16(h[21:], 0)                   // attributes: no compression
	binary.BigEndian.PutUint32(h[23:], uint32(len(msgs)-1)) // last offset delta
	binary.BigEndian.PutUint64(h[27:], uint64(first))       // first timestamp
	binary.BigEndian.PutUint64(h[35:], uint64(last))        // max timestamp
	binary.BigEndian.PutUint64(h[43:], uint64(id.pid))      // producer id
	binary.BigEndian.PutUint16(h[51:], uint16(id.epoch))    // producer epoch
	binary.BigEndian.PutUint32(h[53:], uint32(id.seq))      // base sequence
	binary.BigEndian.PutUint32(h[57:], uint32(len(msgs)))   // records
	var rec []byte
	for i, m := range msgs {
		t := first
		if !m.Time.IsZero() {
			t = m.Time.UnixMilli()
		}
		rec = rec[:0]
		rec = append(rec, 0) // attributes
		rec = binary.AppendVarint(rec, t-first)
		rec = binary.AppendVarint(rec, int64(i))
		rec = appendVarBytes(rec, m.Key)
		rec = appendVarBytes(rec, m.Value)
		rec = binary.AppendVarint(rec, int64(len(m.Headers)))
		for _, h := range m.Headers {
			rec = appendVarBytes(rec, []byte(h.Key))
			rec = appendVarBytes(rec, h.Value)
		}
		b = binary.AppendVarint(b, int64(len(rec)))
		b = append(b, rec...)
	}
	binary.BigEndian.PutUint32(b[0:], uint32(len(b)-at))                         // size
	binary.BigEndian.PutUint32(b[at+8:], uint32(len(b)-at-12))                   // batch length: after this field
	binary.BigEndian.PutUint32(b[at+17:], crc32.Checksum(b[at+21:], castagnoli)) // crc: attributes on
	return b
}

// appendVarBytes appends v with its varint length; nil is length -1.
func appendVarBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	b = binary.AppendVarint(b, int64(len(v)))
	return append(b, v...)
}
