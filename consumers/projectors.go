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

// AckProjector folds chat.acks into delivery cursors: in Redis (max wins,
// so acks out of order never move a cursor back) and, when configured, into
// ClickHouse's ack_events log and ack_cursors table.
//
// Redis is written first, so a cursor moves as soon as its batch is read;
// the ClickHouse rows of all partitions then go in one insert per
// InsertWait. A batch counts as done only when both stores hold it; both
// writes are idempotent, so a failure of either retries the batch whole.
type AckProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional

	// InsertWait is how long a batch waits for other partitions' batches to
	// share its ClickHouse insert; default DefaultInsertWait, negative: no
	// waiting, one insert per batch.
	InsertWait time.Duration

	once sync.Once
	ch   *coalescer[store.AckRow]
}

var _ Handler[schema.Ack] = (*AckProjector)(nil)

// Runner returns the ack projector's runner on chat.acks.
func (a *AckProjector) Runner(b Base) (*Runner[schema.Ack], error) {
	if a.Redis == nil {
		return nil, errors.New("consumers: the ack projector needs Redis")
	}
	return NewRunner(runnerConfig(b, GroupAckProjector, topics.Acks, schema.DecodeAck, Handler[schema.Ack](a), a.Redis))
}

// Handle implements Handler.
func (a *AckProjector) Handle(ctx context.Context, part int, recs []Record[schema.Ack]) error {
	acks := make([]schema.Ack, len(recs))
	for i := range recs {
		acks[i] = recs[i].Event
	}
	if err := a.Redis.AdvanceAcks(ctx, acks); err != nil || a.ClickHouse == nil {
		return err
	}
	a.once.Do(func() { a.ch = newCoalescer(a.InsertWait, a.ClickHouse.InsertAcks) })
	rows := make([]store.AckRow, len(recs))
	for i := range recs {
		rows[i] = store.AckRow{Ack: recs[i].Event, Partition: int32(part), Offset: recs[i].Offset}
	}
	return a.ch.add(ctx, rows)
}

// MemberProjector folds chat.members into membership: a joiner starts at
// the group head (its cursors are raised to the join position), a member
// who left is kept as left, with the position where they left. Redis is
// written first and ClickHouse's rows are coalesced, as in AckProjector.
type MemberProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional
	InsertWait time.Duration     // as in AckProjector

	once sync.Once
	ch   *coalescer[store.MemberRow]
}

var _ Handler[schema.Member] = (*MemberProjector)(nil)

// Runner returns the member projector's runner on chat.members.
func (m *MemberProjector) Runner(b Base) (*Runner[schema.Member], error) {
	if m.Redis == nil {
		return nil, errors.New("consumers: the member projector needs Redis")
	}
	return NewRunner(runnerConfig(b, GroupMemberProjector, topics.Members, schema.DecodeMember, Handler[schema.Member](m), m.Redis))
}

// Handle implements Handler.
func (m *MemberProjector) Handle(ctx context.Context, part int, recs []Record[schema.Member]) error {
	ms := make([]schema.Member, len(recs))
	for i := range recs {
		ms[i] = recs[i].Event
	}
	if err := m.Redis.ApplyMembers(ctx, ms); err != nil || m.ClickHouse == nil {
		return err
	}
	m.once.Do(func() { m.ch = newCoalescer(m.InsertWait, m.ClickHouse.InsertMembers) })
	rows := make([]store.MemberRow, len(recs))
	for i := range recs {
		rows[i] = store.MemberRow{Member: recs[i].Event, Partition: int32(part), Offset: recs[i].Offset}
	}
	return m.ch.add(ctx, rows)
}
