package consumers

import (
	"context"
	"errors"

	"github.com/groupchat/chatd/producers"
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
//
// chat.receipts is compacted like chat.acks, and a read cursor left behind
// by its member's last record is corrected the same way (see AckProjector).
type ReceiptProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional

	producer *producers.Producer // Base.DeadLetter's: writes corrections

	lazyRows[store.ReceiptRow] // Flusher
	replays                    // Starter
}

var (
	_ Handler[schema.Receipt] = (*ReceiptProjector)(nil)
	_ Flusher                 = (*ReceiptProjector)(nil)
	_ Starter                 = (*ReceiptProjector)(nil)
)

// Runner returns the receipt projector's runner on chat.receipts.
func (p *ReceiptProjector) Runner(b Base) (*Runner[schema.Receipt], error) {
	if p.Redis == nil {
		return nil, errors.New("consumers: the receipt projector needs Redis")
	}
	p.producer = b.DeadLetter
	return NewRunner(runnerConfig(b, GroupReceiptProjector, topics.Receipts, schema.DecodeReceipt, Handler[schema.Receipt](p), p.Redis))
}

// Handle implements Handler.
func (p *ReceiptProjector) Handle(ctx context.Context, part int, recs []Record[schema.Receipt]) error {
	prod, err := p.producerFor(ctx, p.Redis, GroupReceiptProjector, topics.Receipts, part, recs[0].Offset, recs[len(recs)-1].Offset, p.producer)
	if err != nil {
		return err
	}
	apply := correcting(p.Redis.AdvanceReadsBehind, prod, (*producers.Producer).SendReceipts, "read",
		func(c store.Cursor, at int64) schema.Receipt {
			return schema.Receipt{Gid: c.Gid, Uid: c.Uid, Upto: c.Upto, At: at}
		})
	return project(ctx, p.get(p.ClickHouse, (*store.ClickHouse).InsertReceipts), part, recs, apply, func(r *Record[schema.Receipt]) store.ReceiptRow {
		return store.ReceiptRow{Receipt: r.Event, Partition: int32(part), Offset: r.Offset}
	})
}
