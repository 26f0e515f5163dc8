package consumers

import (
	"context"
	"errors"
	"sync"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// AckProjector folds chat.acks into delivery cursors: in Redis (max wins,
// so acks out of order never move a cursor back) and, when configured, into
// ClickHouse's ack_events log and ack_cursors table.
//
// Redis is written in Handle, so a cursor moves as soon as its batch is
// read; the ClickHouse rows of all partitions are buffered and inserted
// together when a commit is due (Flusher). A position is committed only
// when both stores hold what it covers; both writes are idempotent.
type AckProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional

	once sync.Once
	buf  *rowBuffer[store.AckRow]
}

var (
	_ Handler[schema.Ack] = (*AckProjector)(nil)
	_ Flusher             = (*AckProjector)(nil)
)

// Runner returns the ack projector's runner on chat.acks.
func (a *AckProjector) Runner(b Base) (*Runner[schema.Ack], error) {
	if a.Redis == nil {
		return nil, errors.New("consumers: the ack projector needs Redis")
	}
	return NewRunner(runnerConfig(b, GroupAckProjector, topics.Acks, schema.DecodeAck, Handler[schema.Ack](a), a.Redis))
}

// Handle implements Handler.
func (a *AckProjector) Handle(ctx context.Context, part int, recs []Record[schema.Ack]) error {
	buf := a.buffer()
	if err := buf.makeRoom(ctx); err != nil {
		return err
	}
	acks := make([]schema.Ack, len(recs))
	for i := range recs {
		acks[i] = recs[i].Event
	}
	if err := a.Redis.AdvanceAcks(ctx, acks); err != nil || buf == nil {
		return err
	}
	rows := make([]store.AckRow, len(recs))
	for i := range recs {
		rows[i] = store.AckRow{Ack: recs[i].Event, Partition: int32(part), Offset: recs[i].Offset}
	}
	buf.add(part, recs[0].Offset, rows)
	return nil
}

func (a *AckProjector) buffer() *rowBuffer[store.AckRow] {
	a.once.Do(func() {
		if a.ClickHouse != nil {
			a.buf = newRowBuffer(a.ClickHouse.InsertAcks)
		}
	})
	return a.buf
}

// Flush implements Flusher.
func (a *AckProjector) Flush(ctx context.Context, force bool) error {
	return a.buffer().Flush(ctx, force)
}

// Durable implements Flusher.
func (a *AckProjector) Durable(part int) int64 { return a.buffer().Durable(part) }

// MemberProjector folds chat.members into membership: a joiner starts at
// the group head (its cursors are raised to the join position), a member
// who left is kept as left, with the position where they left. Redis is
// written in Handle and ClickHouse's rows are buffered, as in AckProjector.
type MemberProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional

	once sync.Once
	buf  *rowBuffer[store.MemberRow]
}

var (
	_ Handler[schema.Member] = (*MemberProjector)(nil)
	_ Flusher                = (*MemberProjector)(nil)
)

// Runner returns the member projector's runner on chat.members.
func (m *MemberProjector) Runner(b Base) (*Runner[schema.Member], error) {
	if m.Redis == nil {
		return nil, errors.New("consumers: the member projector needs Redis")
	}
	return NewRunner(runnerConfig(b, GroupMemberProjector, topics.Members, schema.DecodeMember, Handler[schema.Member](m), m.Redis))
}

// Handle implements Handler.
func (m *MemberProjector) Handle(ctx context.Context, part int, recs []Record[schema.Member]) error {
	buf := m.buffer()
	if err := buf.makeRoom(ctx); err != nil {
		return err
	}
	ms := make([]schema.Member, len(recs))
	for i := range recs {
		ms[i] = recs[i].Event
	}
	if err := m.Redis.ApplyMembers(ctx, ms); err != nil || buf == nil {
		return err
	}
	rows := make([]store.MemberRow, len(recs))
	for i := range recs {
		rows[i] = store.MemberRow{Member: recs[i].Event, Partition: int32(part), Offset: recs[i].Offset}
	}
	buf.add(part, recs[0].Offset, rows)
	return nil
}

func (m *MemberProjector) buffer() *rowBuffer[store.MemberRow] {
	m.once.Do(func() {
		if m.ClickHouse != nil {
			m.buf = newRowBuffer(m.ClickHouse.InsertMembers)
		}
	})
	return m.buf
}

// Flush implements Flusher.
func (m *MemberProjector) Flush(ctx context.Context, force bool) error {
	return m.buffer().Flush(ctx, force)
}

// Durable implements Flusher.
func (m *MemberProjector) Durable(part int) int64 { return m.buffer().Durable(part) }
