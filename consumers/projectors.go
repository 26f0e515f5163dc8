package consumers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupchat/chatd/producers"
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
//
// chat.acks is compacted: it keeps a member's last record only. When that
// record is below the member's cursor (two devices acked 100, then 90,
// before the first was projected), a replay of the compacted topic would
// move the cursor back; so Handle appends the cursor again, as a
// correction, and a member's last record is their highest. A replay of
// what it had handled before a reset appends none (see replays).
type AckProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional

	producer *producers.Producer // Base.DeadLetter's: writes corrections

	lazyRows[store.AckRow] // Flusher
	replays                // Starter
}

var (
	_ Handler[schema.Ack] = (*AckProjector)(nil)
	_ Flusher             = (*AckProjector)(nil)
	_ Starter             = (*AckProjector)(nil)
)

// Runner returns the ack projector's runner on chat.acks.
func (a *AckProjector) Runner(b Base) (*Runner[schema.Ack], error) {
	if a.Redis == nil {
		return nil, errors.New("consumers: the ack projector needs Redis")
	}
	a.producer = b.DeadLetter
	return NewRunner(runnerConfig(b, GroupAckProjector, topics.Acks, schema.DecodeAck, Handler[schema.Ack](a), a.Redis))
}

// Handle implements Handler.
func (a *AckProjector) Handle(ctx context.Context, part int, recs []Record[schema.Ack]) error {
	p, err := a.producerFor(ctx, a.Redis, GroupAckProjector, topics.Acks, part, recs[0].Offset, recs[len(recs)-1].Offset, a.producer)
	if err != nil {
		return err
	}
	apply := correcting(a.Redis.AdvanceAcksBehind, p, (*producers.Producer).SendAcks, "ack",
		func(c store.Cursor, at int64) schema.Ack {
			return schema.Ack{Gid: c.Gid, Uid: c.Uid, Upto: c.Upto, At: at}
		})
	return project(ctx, a.get(a.ClickHouse, (*store.ClickHouse).InsertAcks), part, recs, apply, func(r *Record[schema.Ack]) store.AckRow {
		return store.AckRow{Ack: r.Event, Partition: int32(part), Offset: r.Offset}
	})
}

// MemberProjector folds chat.members into membership: a joiner starts at
// the group head (its cursors are raised to the join position), a member
// who left is kept as left, with the position where they left. Redis is
// written in Handle and ClickHouse's rows are buffered, as in AckProjector.
type MemberProjector struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // optional

	lazyRows[store.MemberRow] // Flusher

	mu   sync.Mutex
	from map[int]int64 // per partition, the offset from which records may be replays (store.Redis.ApplyMembersAt)
}

var (
	_ Handler[schema.Member] = (*MemberProjector)(nil)
	_ Flusher                = (*MemberProjector)(nil)
	_ Starter                = (*MemberProjector)(nil)
)

// Start implements Starter: records from the saved position on may have
// been applied before (a crash between effect and commit). A record below
// it means the log was cut back or recreated, its offsets given to new
// records: the rest of the run applies every record.
func (m *MemberProjector) Start(part int, saved int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.from == nil {
		m.from = map[int]int64{}
	}
	m.from[part] = saved
}

// replaysFrom returns the offset from which the records of part, the first
// at first, may be replays. Without Start (chatctl rebuild), every record.
func (m *MemberProjector) replaysFrom(part int, first int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	from, ok := m.from[part]
	if !ok {
		return math.MinInt64
	}
	if first < from {
		from = math.MaxInt64
		m.from[part] = from
	}
	return from
}

// Runner returns the member projector's runner on chat.members.
func (m *MemberProjector) Runner(b Base) (*Runner[schema.Member], error) {
	if m.Redis == nil {
		return nil, errors.New("consumers: the member projector needs Redis")
	}
	return NewRunner(runnerConfig(b, GroupMemberProjector, topics.Members, schema.DecodeMember, Handler[schema.Member](m), m.Redis))
}

// Handle implements Handler.
// The events go with their offsets, so that a replay skips what a member
// had applied already (store.Redis.ApplyMembersAt).
func (m *MemberProjector) Handle(ctx context.Context, part int, recs []Record[schema.Member]) error {
	apply := func(ctx context.Context, ms []schema.Member) error {
		offsets := make([]int64, len(recs))
		for i := range recs {
			offsets[i] = recs[i].Offset
		}
		return m.Redis.ApplyMembersAt(ctx, ms, offsets, m.replaysFrom(part, recs[0].Offset))
	}
	return project(ctx, m.get(m.ClickHouse, (*store.ClickHouse).InsertMembers), part, recs, apply, func(r *Record[schema.Member]) store.MemberRow {
		return store.MemberRow{Member: r.Event, Partition: int32(part), Offset: r.Offset}
	})
}

// lazyRows is a projector's ClickHouse row buffer, made by the first
// Handle; nil without ClickHouse. It makes the projector a Flusher.
type lazyRows[R any] struct {
	once sync.Once
	buf  atomic.Pointer[rowBuffer[R]]
}

func (l *lazyRows[R]) get(ch *store.ClickHouse, insert func(*store.ClickHouse, context.Context, []R) error) *rowBuffer[R] {
	l.once.Do(func() {
		if ch != nil {
			l.buf.Store(newRowBuffer(func(ctx context.Context, rows []R) error { return insert(ch, ctx, rows) }))
		}
	})
	return l.buf.Load()
}

// Flush implements Flusher.
func (l *lazyRows[R]) Flush(ctx context.Context, force bool) error {
	return l.buf.Load().Flush(ctx, force)
}

// Durable implements Flusher.
func (l *lazyRows[R]) Durable(part int) int64 { return l.buf.Load().Durable(part) }

// replays tells a cursor projector which batches are replays of records
// it had handled before its position was set back (a consumer-group
// reset): their corrections were appended when they were first handled,
// and the log holds them after the records, so a replay appends none (it
// would add a receipt of the replay's day for every member with a higher
// record further on, at every batch's end). The cursor projectors embed
// it, which makes them Starters.
type replays struct {
	mu      sync.Mutex
	handled map[int]store.Handled // per partition, store.Redis.Handled, once read
	saved   map[int]int64         // per partition, the position it started from
}

// Start implements Starter: the position may have been set back since the
// partition was last started.
func (r *replays) Start(part int, saved int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.handled, part)
	if r.saved == nil {
		r.saved = map[int]int64{}
	}
	r.saved[part] = saved
}

// producerFor returns p, or nil (no corrections) when the batch of part
// from first to last is a replay. A batch below the position the partition
// started from is of a log recreated or cut back (the runner reads it from
// its start then): nothing of it was handled before.
func (r *replays) producerFor(ctx context.Context, rds *store.Redis, group, topic string, part int, first, last int64, p *producers.Producer) (*producers.Producer, error) {
	if p == nil {
		return nil, nil
	}
	r.mu.Lock()
	h, ok := r.handled[part]
	saved, started := r.saved[part]
	r.mu.Unlock()
	if !ok {
		var err error
		if h, err = rds.Handled(ctx, group, topic, part); err != nil {
			return nil, err
		}
		if started && first < saved {
			h = store.Handled{End: -1}
		}
		r.mu.Lock()
		if r.handled == nil {
			r.handled = map[int]store.Handled{}
		}
		r.handled[part] = h
		r.mu.Unlock()
	}
	if h.Covers(first, last) {
		return nil, nil
	}
	return p, nil
}

// correcting returns an apply for project that raises the cursors with
// advance and appends again, with send, each cursor that the batch's last
// record of its member left behind (see AckProjector); none without p.
func correcting[E any](advance func(context.Context, []E) ([]store.Cursor, error), p *producers.Producer,
	send func(*producers.Producer, context.Context, ...E) error, what string, mk func(c store.Cursor, at int64) E) func(context.Context, []E) error {
	return func(ctx context.Context, events []E) error {
		behind, err := advance(ctx, events)
		if err != nil || len(behind) == 0 || p == nil {
			return err
		}
		at := time.Now().UnixMilli()
		fix := make([]E, len(behind))
		for i, c := range behind {
			fix[i] = mk(c, at)
		}
		if err := send(p, ctx, fix...); err != nil {
			return fmt.Errorf("consumers: append %d %s cursors the log left behind: %w", len(fix), what, err)
		}
		return nil
	}
}

// project is a projector's Handle: apply the batch's events to Redis, then
// buffer their ClickHouse rows (when there is a buffer), after making room
// in it first so that a failure leaves nothing half done.
func project[E, R any](ctx context.Context, buf *rowBuffer[R], part int, recs []Record[E],
	apply func(context.Context, []E) error, row func(*Record[E]) R) error {
	if err := buf.makeRoom(ctx); err != nil {
		return err
	}
	events := make([]E, len(recs))
	for i := range recs {
		events[i] = recs[i].Event
	}
	if err := apply(ctx, events); err != nil || buf == nil {
		return err
	}
	rows := make([]R, len(recs))
	for i := range recs {
		rows[i] = row(&recs[i])
	}
	buf.add(part, recs[0].Offset, rows)
	return nil
}
