package consumers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// Persister stores chat.messages: once into ClickHouse (the history, when
// configured) and into each group's recent window in Redis, dropping
// duplicate sends (same gid, sender and client_msg_id). Its position lives
// in Redis with the window, so a wiped Redis is rebuilt by replay; ClickHouse
// collapses the replayed rows (ReplacingMergeTree on (gid, msgid)).
//
// ClickHouse is written before the window, so a message leaves the window
// only after ClickHouse has it; the rows of all partitions go in one insert
// per InsertWait.
//
// Run by its Runner, it writes Redis only while the partition's saved
// position is there (store.Fence): once Redis lost its data, the batch in
// hand fails with store.ErrStateLost and the runner replays from the start,
// so a window never holds messages without those before them.
type Persister struct {
	Redis      *store.Redis      // required
	ClickHouse *store.ClickHouse // nil: the window is the whole history

	// InsertWait is how long a batch waits for other partitions' batches to
	// share its ClickHouse insert; the window is written after it. Default
	// DefaultPersisterWait, negative: one insert per batch.
	InsertWait time.Duration

	once sync.Once
	ch   *coalescer[store.MessageRow]

	// fenced: Redis writes check the runner's saved position (set by
	// Runner, whose runner claims it before handling a record).
	fenced bool

	mu     sync.Mutex
	starts map[int]*partStart // where each partition's state began, by Start

	// afterInsert runs between the ClickHouse insert and the Redis write;
	// an error aborts the batch. Tests use it to crash the persister at the
	// worst moment.
	afterInsert func() error
}

var (
	_ Handler[schema.Message] = (*Persister)(nil)
	_ Starter                 = (*Persister)(nil)
)

// Runner returns the persister's runner on chat.messages.
func (p *Persister) Runner(b Base) (*Runner[schema.Message], error) {
	if p.Redis == nil {
		return nil, errors.New("consumers: the persister needs Redis")
	}
	p.fenced = true
	return NewRunner(runnerConfig(b, GroupPersister, topics.Messages, schema.DecodeMessage, Handler[schema.Message](p), p.Redis))
}

// Handle implements Handler.
func (p *Persister) Handle(ctx context.Context, part int, recs []Record[schema.Message]) error {
	if len(recs) == 0 {
		return nil
	}
	msgs := make([]schema.Message, len(recs))
	for i := range recs {
		msgs[i] = recs[i].Event
		msgs[i].MsgID = recs[i].Offset
	}
	var fence *store.Fence
	if p.fenced {
		fence = &store.Fence{Consumer: GroupPersister, Topic: topics.Messages, Partition: part}
	}
	origin, err := p.origin(ctx, part, fence, msgs)
	if err != nil {
		return err
	}
	if err := p.claimOriginals(ctx, fence, origin, msgs); err != nil {
		return err
	}
	dup, err := p.Redis.ClaimSends(ctx, fence, msgs)
	if err != nil {
		return err
	}
	keep := msgs[:0]
	for i := range msgs {
		if !dup[i] {
			keep = append(keep, msgs[i])
		}
	}
	if len(keep) == 0 {
		return nil
	}
	if p.ClickHouse != nil {
		p.once.Do(func() { p.ch = newCoalescer(p.InsertWait, p.ClickHouse.InsertMessageRows) })
		rows := make([]store.MessageRow, len(keep))
		for i := range keep {
			rows[i] = store.MessageRow{Message: keep[i], Partition: int32(part)}
		}
		if err := p.ch.add(ctx, rows); err != nil {
			return err
		}
	}
	if p.afterInsert != nil {
		if err := p.afterInsert(); err != nil {
			return err
		}
	}
	var older store.OlderFloors
	if p.ClickHouse != nil && (origin == nil || origin.Offset > 0) {
		older = p.olderFloors // the state may lack older messages of a group
	}
	return p.Redis.AppendWindowOver(ctx, fence, keep, older)
}

// olderFloors gives a group whose window starts with the batch the floor
// ClickHouse holds below it. The window starts with the batch for a new
// group, and for every group when Redis is rebuilt by a replay: then, once
// retention has moved the log's start above 0, ClickHouse may hold older
// messages of the group that the window, with no floor, would disown. Not
// only on a replay's first batches: a group silent since before the log's
// start shows up at any point of the replay, or after it.
//
// One query for the batch, below the lowest bound: the batch is a run of
// one partition's log, so between that and a group's own bound there is
// none of the group's messages stored (only resends dropped, or poison).
func (p *Persister) olderFloors(ctx context.Context, below map[string]int64) (map[string]int64, error) {
	gids := make([]string, 0, len(below))
	before := int64(math.MaxInt64)
	for gid, b := range below {
		gids = append(gids, gid)
		before = min(before, b)
	}
	return p.ClickHouse.NewestBefore(ctx, gids, before)
}

// partStart is how the runner started a partition (Start) and, once its
// first batch is in, where the partition's state began.
type partStart struct {
	claimed  bool          // from a claimed start: from the log's start, the state holding nothing of it (or kept, after a reset to the start)
	saved    int64         // the position it started from
	resolved bool          // origin is known, or known to be unknown
	origin   *store.Origin // nil: unknown (no runner, or a state without one)
}

// Start implements Starter.
func (p *Persister) Start(part int, saved int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.starts == nil {
		p.starts = map[int]*partStart{}
	}
	p.starts[part] = &partStart{claimed: saved == kafka.FirstOffset, saved: saved}
}

// origin returns where the state of the partition began, or nil when that
// is unknown. A run from a claimed start, or from a position set by hand
// (chatctl consumer-groups reset), records its first record as the origin,
// next to the position, before that record's effect; a run from a saved
// position reads it back. So a restart knows, as the run that began
// the state did, whether the state holds the whole log (origin 0: no group
// can lack older messages, and olderFloors is not needed) and which sends
// claimOriginals must look at: a restart in the middle of a replay that
// began after retention goes on claiming the first sends retention removed.
// One Redis call per partition run.
func (p *Persister) origin(ctx context.Context, part int, fence *store.Fence, msgs []schema.Message) (*store.Origin, error) {
	p.mu.Lock()
	s := p.starts[part]
	p.mu.Unlock()
	if s == nil || fence == nil {
		return nil, nil
	}
	if s.resolved {
		return s.origin, nil
	}
	fresh := s.claimed
	if !fresh {
		o, next, err := p.Redis.Origin(ctx, *fence)
		if err != nil && !errors.Is(err, store.ErrCorruptValue) {
			return nil, fmt.Errorf("consumers: %w", err)
		}
		// A value it cannot read is an unknown origin (olderFloors on,
		// claimOriginals off), not a batch retried for ever.
		s.origin, fresh = o, next
	}
	if fresh {
		o := store.Origin{Offset: msgs[0].MsgID, SentAt: msgs[0].SentAt}
		if err := p.seedSilentGroups(ctx, fence, o.Offset); err != nil {
			return nil, err
		}
		if err := p.Redis.SaveOrigin(ctx, *fence, s.saved, o); err != nil {
			return nil, fmt.Errorf("consumers: %w", err)
		}
		s.origin = &o
	}
	s.resolved = true
	return s.origin, nil
}

// seedSilentGroups gives every group of the partition that ClickHouse
// holds messages of below origin a window saying so (store.SeedWindows),
// when the state begins past the partition's first record: a group silent
// since before origin would otherwise look empty (head -1, nothing to
// pull, acks refused) until its next message. Done before the origin is
// saved, so a run that stops before its first commit, and so starts fresh
// again, seeds again.
func (p *Persister) seedSilentGroups(ctx context.Context, fence *store.Fence, origin int64) error {
	if p.ClickHouse == nil || origin <= 0 {
		return nil
	}
	err := p.ClickHouse.NewestOfPartition(ctx, int32(fence.Partition), origin, func(newest map[string]int64) error {
		return p.Redis.SeedWindows(ctx, fence, newest)
	})
	if err != nil {
		return fmt.Errorf("consumers: seed the windows of groups silent since before offset %d: %w", origin, err)
	}
	return nil
}

// claimOriginals claims again, before ClaimSends, the first sends of the
// batch's resends that came before the state's origin: a state that began
// past offset 0 meets a resend whose first send it never saw (Redis lost
// its data and retention moved the log's start) or saw too long ago (its
// position was set back by hand, and the claim expired). ClickHouse holds
// those first sends (they were stored before the origin); chatctl backfill
// finds them the same way. Only messages sent within the dedup window of
// the origin can be such resends, so the rest of a replay, and every batch
// of a whole log, costs nothing.
func (p *Persister) claimOriginals(ctx context.Context, fence *store.Fence, origin *store.Origin, msgs []schema.Message) error {
	if p.ClickHouse == nil || origin == nil || origin.Offset <= 0 {
		return nil // not known, or the state holds the partition's first record
	}
	part := int32(fence.Partition)
	originals, err := p.ClickHouse.FirstSendsBefore(ctx, part, origin.Offset, origin.SentAt, p.Redis.DedupWindow().Milliseconds(), msgs)
	if err != nil {
		return fmt.Errorf("consumers: %w", err)
	}
	return p.Redis.ClaimOriginals(ctx, fence, originals)
}
