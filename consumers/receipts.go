package consumers

import (
	"context"
	"errors"

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
// Redis is written in Handle, so read counts move as soon as a batch is
// read; ClickHouse's rows are buffered and inserted together when a commit
// is due, as in AckProjector.
type ReceiptProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional

	lazyRows[store.ReceiptRow] // Flusher
}

var (
	_ Handler[schema.Receipt] = (*ReceiptProjector)(nil)
	_ Flusher                 = (*ReceiptProjector)(nil)
)

// Runner returns the receipt projector's runner on chat.receipts.
func (p *ReceiptProjector) Runner(b Base) (*Runner[schema.Receipt], error) {
	if p.Redis == nil {
		return nil, errors.New("consumers: the receipt projector needs Redis")
	}
	return NewRunner(runnerConfig(b, GroupReceiptProjector, topics.Receipts, schema.DecodeReceipt, Handler[schema.Receipt](p), p.Redis))
}

// Handle implements Handler.
func (p *ReceiptProjector) Handle(ctx context.Context, part int, recs []Record[schema.Receipt]) error {
	return project(ctx, p.get(p.ClickHouse, (*store.ClickHouse).InsertReceipts), part, recs, p.Redis.AdvanceReads, func(r *Record[schema.Receipt]) store.ReceiptRow {
		return store.ReceiptRow{Receipt: r.Event, Partition: int32(part), Offset: r.Offset}
	})
}
