package consumers

import (
	"context"
	"errors"
	"sync"

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

	once sync.Once
	buf  *rowBuffer[store.ReceiptRow]
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
	buf := p.buffer()
	if err := buf.makeRoom(ctx); err != nil {
		return err
	}
	rs := make([]schema.Receipt, len(recs))
	for i := range recs {
		rs[i] = recs[i].Event
	}
	if err := p.Redis.AdvanceReads(ctx, rs); err != nil || buf == nil {
		return err
	}
	rows := make([]store.ReceiptRow, len(recs))
	for i := range recs {
		rows[i] = store.ReceiptRow{Receipt: recs[i].Event, Partition: int32(part), Offset: recs[i].Offset}
	}
	buf.add(part, recs[0].Offset, rows)
	return nil
}

func (p *ReceiptProjector) buffer() *rowBuffer[store.ReceiptRow] {
	p.once.Do(func() {
		if p.ClickHouse != nil {
			p.buf = newRowBuffer(p.ClickHouse.InsertReceipts)
		}
	})
	return p.buf
}

// Flush implements Flusher.
func (p *ReceiptProjector) Flush(ctx context.Context, force bool) error {
	return p.buffer().Flush(ctx, force)
}

// Durable implements Flusher.
func (p *ReceiptProjector) Durable(part int) int64 { return p.buffer().Durable(part) }
