package consumers

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// GroupReceiptProjector is the receipt projector's consumer group.
const GroupReceiptProjector = "chat.receipt-projector"

// ReceiptProjector folds chat.receipts into read cursors in Redis (max
// wins): one sorted set per group, from which read counts are range counts.
// When configured, it also writes ClickHouse's receipt_events log and
// read_cursors table, the analysts' copy (docs/analytics.md).
//
// Redis is written first, so read counts move as soon as a batch is read;
// ClickHouse's rows are coalesced across partitions, as in AckProjector. A
// batch counts as done only when both stores hold it, and both writes are
// idempotent, so a failure of either retries the batch whole.
type ReceiptProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional
	InsertWait time.Duration     // as in AckProjector

	once sync.Once
	ch   *coalescer[store.ReceiptRow]
}

var _ Handler[schema.Receipt] = (*ReceiptProjector)(nil)

// Runner returns the receipt projector's runner on chat.receipts.
func (p *ReceiptProjector) Runner(b Base) (*Runner[schema.Receipt], error) {
	if p.Redis == nil {
		return nil, errors.New("consumers: the receipt projector needs Redis")
	}
	return NewRunner(runnerConfig(b, GroupReceiptProjector, topics.Receipts, schema.DecodeReceipt, Handler[schema.Receipt](p), p.Redis))
}

// Handle implements Handler.
func (p *ReceiptProjector) Handle(ctx context.Context, part int, recs []Record[schema.Receipt]) error {
	rs := make([]schema.Receipt, len(recs))
	for i := range recs {
		rs[i] = recs[i].Event
	}
	if err := p.Redis.AdvanceReads(ctx, rs); err != nil || p.ClickHouse == nil {
		return err
	}
	p.once.Do(func() { p.ch = newCoalescer(p.InsertWait, p.ClickHouse.InsertReceipts) })
	rows := make([]store.ReceiptRow, len(recs))
	for i := range recs {
		rows[i] = store.ReceiptRow{Receipt: recs[i].Event, Partition: int32(part), Offset: recs[i].Offset}
	}
	return p.ch.add(ctx, rows)
}
