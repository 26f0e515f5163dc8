package consumers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

// A batch is bounded by its bytes as well as its records: a replay of
// large messages (CHAT_MAX_BODY raised) must not hold BatchSize of them at
// once. Each batch ends with the record that reaches BatchBytes.
func TestABatchEndsAtItsBytes(t *testing.T) {
	k := newKafka(t, 1)
	acks := make([]schema.Ack, 2000)
	gid, uid := strings.Repeat("g", 60), strings.Repeat("u", 60)
	least, most := 1<<20, 0 // bytes of a record
	for i := range acks {
		acks[i] = schema.Ack{Gid: gid, Uid: uid, Upto: int64(i), At: 1}
		n := len(schema.MemberKey(gid, uid)) + len(schema.AppendAck(nil, &acks[i]))
		least, most = min(least, n), max(most, n)
	}
	if err := k.prod.SendAcks(context.Background(), acks...); err != nil {
		t.Fatal(err)
	}
	const limit = 4 << 10
	h := &batchSizes{memAcks: newMemAcks()}
	runAcksWith(t, k, "acks-bytes", h, h.memAcks, func(c *Config[schema.Ack]) { c.BatchBytes = limit })
	waitFor(t, "all acks handled", 20*time.Second, func() bool { return h.handled() == len(acks) })
	h.mu.Lock()
	defer h.mu.Unlock()
	if upper, lower := (limit+least-1)/least, limit/most/2; h.most > upper || h.most < lower {
		t.Fatalf("batches of up to %d records of %d to %d bytes under a limit of %d bytes; want %d to %d", h.most, least, most, limit, lower, upper)
	}
}

// batchSizes is memAcks that notes its largest batch.
type batchSizes struct {
	*memAcks
	most int
}

func (b *batchSizes) Handle(ctx context.Context, part int, recs []Record[schema.Ack]) error {
	b.mu.Lock()
	b.most = max(b.most, len(recs))
	b.mu.Unlock()
	return b.memAcks.Handle(ctx, part, recs)
}
