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

	mu      sync.Mutex
	replays map[int]*replay // partitions handled from a claimed start, by Start

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
	msgs := make([]schema.Message, len(recs))
	for i := range recs {
		msgs[i] = recs[i].Event
		msgs[i].MsgID = recs[i].Offset
	}
	var fence *store.Fence
	if p.fenced {
		fence = &store.Fence{Consumer: GroupPersister, Topic: topics.Messages, Partition: part}
	}
	if err := p.claimOriginals(ctx, part, fence, msgs); err != nil {
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
	if p.ClickHouse != nil && !p.wholeLog(part) {
		older = p.olderFloors
	}
	return p.Redis.AppendWindowOver(ctx, fence, keep, older)
}

// wholeLog reports whether this run of the partition began at its offset 0:
// then every message of the partition passed through this run, and no
// group's window can lack older messages, so olderFloors is not needed (a
// replay of a log that retention never cut, as the embedded default makes
// at every start, pays nothing for it).
func (p *Persister) wholeLog(part int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.replays[part]
	return r != nil && r.begun && r.start == 0
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

// replay is a partition the persister handles from a claimed start: Redis
// holds none of its claims. start is the offset of the first record
// handled, first that record's sent_at.
type replay struct {
	begun        bool
	start, first int64
}

// Start implements Starter.
func (p *Persister) Start(part int, saved int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if saved != kafka.FirstOffset {
		delete(p.replays, part)
		return
	}
	if p.replays == nil {
		p.replays = map[int]*replay{}
	}
	p.replays[part] = &replay{}
}

// claimOriginals claims again, before ClaimSends, the first sends of the
// batch's resends that retention removed from the topic: a partition
// handled from a claimed start whose first record is past offset 0 (Redis
// lost its data and the log no longer starts at 0) meets a resend whose
// first send it never sees, and whose claim went with Redis. ClickHouse
// holds those first sends (they were stored before retention removed
// them); chatctl backfill finds them the same way. Only messages sent
// within the dedup window of the first record handled can be such resends,
// so the rest of a replay, and every batch outside one, costs nothing.
func (p *Persister) claimOriginals(ctx context.Context, part int, fence *store.Fence, msgs []schema.Message) error {
	if p.ClickHouse == nil {
		return nil
	}
	p.mu.Lock()
	r := p.replays[part]
	if r != nil && !r.begun {
		r.begun, r.start, r.first = true, msgs[0].MsgID, msgs[0].SentAt
	}
	p.mu.Unlock()
	if r == nil || r.start <= 0 {
		return nil // not a replay, or the topic holds the partition's first record
	}
	originals, err := p.ClickHouse.FirstSendsBefore(ctx, int32(part), r.start, r.first, p.Redis.DedupWindow().Milliseconds(), msgs)
	if err != nil {
		return fmt.Errorf("consumers: %w", err)
	}
	return p.Redis.ClaimOriginals(ctx, fence, originals)
}
