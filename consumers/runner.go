package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/metrics"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/topics"
)

// Record is one decoded record.
type Record[E any] struct {
	Partition int
	Offset    int64
	Time      time.Time
	Event     E
	// End is the partition's end (the offset after its last record) when
	// the record was fetched: a batch ending there has caught up.
	End int64
}

// Handler makes the effect of a batch of one partition durable.
type Handler[E any] interface {
	Handle(ctx context.Context, partition int, recs []Record[E]) error
}

// Starter is a Handler that is told where the runner starts a partition,
// before its first batch: saved is the position saved next to the state,
// kafka.FirstOffset when the runner claimed the partition's start (the
// state holds nothing of it: a first run, or a replay after the state was
// lost). Only with an OffsetStore. Start is called from the partition's
// goroutine, before any Handle of the partition it tells about.
type Starter interface {
	Start(part int, saved int64)
}

// Stopper is a Handler that holds what lives as long as its runner (a
// connection pool); Stop is called once, when Run returns.
type Stopper interface {
	Stop()
}

// OffsetStore keeps a consumer's positions next to its state, so that
// wiping the state also forgets the positions and the consumer replays its
// topic from the start. *store.Redis is one.
//
// AdvanceOffset saves a partition's position only if the saved one is still
// from (from -1: none saved) and reports whether it did: a position that
// moved or vanished under a running consumer means its state was wiped while
// it ran (Redis restarted without persistence), and the runner replays the
// partition from what is saved.
//
// Fingerprint names the server(s) that hold the state; it changes when they
// restart or fail over. A Redis back from an older snapshot (or a promoted
// replica that lagged) may hold the very position the runner saved last
// without the effects made after it, so the runner compares the
// fingerprint taken when it started a partition with the one before each
// save and at each state check, and replays the partition from what is
// saved when they differ. "" when the store cannot tell: the check is off.
type OffsetStore interface {
	Offsets(ctx context.Context, consumer, topic string) (map[int]int64, error)
	AdvanceOffset(ctx context.Context, consumer, topic string, part int, from, to int64) (bool, error)
	Fingerprint(ctx context.Context) (string, error)
}

// ReplayMarker is an OffsetStore that also keeps a mark, beside a
// partition's position, that the state holds every record the partition had
// when the runner caught up with it (store.Redis.MarkReplayed). The runner
// marks each partition once an assignment, after handling the batch that
// caught up, so that a state lost and replayed is marked again only once
// it is whole; readers of the state tell "not there" from "not replayed
// yet" by it.
type ReplayMarker interface {
	MarkReplayed(ctx context.Context, consumer, topic string, part int) (bool, error)
}

// Config of a Runner.
type Config[E any] struct {
	Brokers  []string        // required
	Security topics.Security // how to reach them; default plaintext
	Group    string          // consumer group id; also names the saved offsets. Required.
	Topic    string          // required

	Decode  func([]byte) (E, error) // required
	Handler Handler[E]              // required
	// Misfiled, when set, says why a record does not belong where it
	// lies (see Misfiled): such a record is poison. The runner reads the
	// topic's partition count for it before joining the group. Optional.
	Misfiled func(e *E, key []byte, part, partitions int) error

	// Offsets, when set, is where the position lives: the group's committed
	// offsets are then only a mirror for operators' lag tools.
	Offsets OffsetStore

	// StartAtEnd starts a partition that the group has no committed offset
	// for at its end (as the reader first finds it) instead of its start.
	// Only without Offsets. Default false.
	StartAtEnd bool

	// DeadLetter receives poison records. Required.
	DeadLetter *producers.Producer

	BatchSize int // most records per Handle; default 10000
	// BatchBytes bounds a batch's keys and values: a batch ends with the
	// record that reaches it (one record larger than it is a batch of its
	// own). Default 16 MiB: 10,000 records of 16 KiB bodies would hold
	// 160 MiB, and more with CHAT_MAX_BODY raised.
	BatchBytes int
	MaxWait    time.Duration // fetch long-poll; default 500ms (kafka-go's is 10s)
	Linger     time.Duration // longest wait to fill a batch once data is known to exist; default 20ms
	// CommitInterval is the longest a handled batch waits for its offset
	// to be saved and committed; default 1s. Batches in between share one
	// commit, so a busy partition commits once per interval instead of once
	// per batch. A restart replays at most this much (effects are
	// idempotent). Negative: commit after every batch.
	CommitInterval time.Duration
	MinBackoff     time.Duration // first retry delay after a failed Handle; default 100ms
	MaxBackoff     time.Duration // default 10s

	SessionTimeout   time.Duration // default 10s
	RebalanceTimeout time.Duration // default 10s

	// StateCheck is how often, with Offsets, a partition checks that its
	// saved position is still there, so that a wiped state is replayed even
	// while no records arrive (a position moved on two checks in a row).
	// Default 2s.
	StateCheck time.Duration

	Logger  *slog.Logger // default slog.Default()
	Metrics *metrics.Set // optional
}

func (c *Config[E]) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 10000
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.MaxWait == 0 {
		c.MaxWait = 500 * time.Millisecond
	}
	if c.Linger == 0 {
		c.Linger = 20 * time.Millisecond
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.RebalanceTimeout == 0 {
		c.RebalanceTimeout = 10 * time.Second
	}
	if c.StateCheck == 0 {
		c.StateCheck = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first setting that cannot work.
func (c Config[E]) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("consumers: no brokers configured; set CHAT_KAFKA_BROKERS")
	case c.Group == "" || c.Topic == "":
		return errors.New("consumers: group and topic are required")
	case c.Decode == nil || c.Handler == nil:
		return errors.New("consumers: decode and handler are required")
	case c.DeadLetter == nil:
		return errors.New("consumers: a dead-letter producer is required")
	case c.BatchSize < 0 || c.BatchBytes < 0 || c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff:
		return errors.New("consumers: batch size, batch bytes and back-off must be positive, max back-off >= min")
	case c.StateCheck < 0 || c.SessionTimeout < 0 || c.RebalanceTimeout < 0:
		return errors.New("consumers: the state check interval and the group's timeouts must be positive durations")
	}
	return nil
}

// DefaultBatchBytes is Config.BatchBytes's default.
const DefaultBatchBytes = 16 << 20

// Runner consumes one topic as one member of a consumer group.
type Runner[E any] struct {
	cfg Config[E]
	log *slog.Logger

	partitions int // the topic's partition count, for Config.Misfiled; set by Run before any partition is read

	mu     sync.Mutex
	joined bool          // a generation of the group has been joined
	lag    map[int]int64 // per assigned partition, after the last batch
	caught map[int]bool  // partition reached its end at least once
	stats  Stats
}

// Stats counts what a Runner did since it started.
type Stats struct {
	Records      int64 // records handed to the handler
	Batches      int64
	DeadLettered int64
	Retries      int64 // failed Handle calls
	Commits      int64 // offsets saved and committed
	Deleted      int64 // records the topic's retention deleted before they were handled
	Replays      int64 // partitions replayed because their saved position vanished (the state was wiped) or Redis restarted or failed over under them
}

// NewRunner checks cfg and returns a Runner; Run starts it.
func NewRunner[E any](cfg Config[E]) (*Runner[E], error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Metrics.Consumer(cfg.Group, cfg.Topic)
	return &Runner[E]{
		cfg:    cfg,
		log:    cfg.Logger.With("consumer", cfg.Group, "topic", cfg.Topic),
		lag:    map[int]int64{},
		caught: map[int]bool{},
	}, nil
}

// Lag returns the records left to read per assigned partition.
func (r *Runner[E]) Lag() map[int]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int]int64, len(r.lag))
	for p, l := range r.lag {
		out[p] = l
	}
	return out
}

// CaughtUp reports whether the runner has joined its group and every
// partition assigned to it has been read to its end at least once since it
// was assigned. A runner the group gave no partition (more processes than
// partitions, a spare, a surge during a rolling update) is caught up: it
// has nothing to read, and a readiness probe must not hold it back.
func (r *Runner[E]) CaughtUp() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lag) == 0 {
		return r.joined
	}
	for p := range r.lag {
		if !r.caught[p] {
			return false
		}
	}
	return true
}

// Stats returns the counters.
func (r *Runner[E]) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Run consumes until ctx is done, then leaves the group and returns nil.
// It returns an error only for a setup that cannot work.
func (r *Runner[E]) Run(ctx context.Context) error {
	if s, ok := r.cfg.Handler.(Stopper); ok {
		defer s.Stop()
	}
	if r.cfg.Misfiled != nil && !r.readPartitions(ctx) {
		return nil
	}
	start := kafka.FirstOffset
	if r.cfg.StartAtEnd && r.cfg.Offsets == nil {
		start = kafka.LastOffset
	}
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                r.cfg.Group,
		Brokers:           r.cfg.Brokers,
		Dialer:            r.cfg.Security.Dialer(),
		Topics:            []string{r.cfg.Topic},
		StartOffset:       start,
		HeartbeatInterval: r.cfg.SessionTimeout / 5,
		SessionTimeout:    r.cfg.SessionTimeout,
		RebalanceTimeout:  r.cfg.RebalanceTimeout,
		JoinGroupBackoff:  time.Second,
		ErrorLogger:       kafka.LoggerFunc(func(f string, a ...any) { r.log.Debug(fmt.Sprintf(f, a...)) }),
	})
	if err != nil {
		return fmt.Errorf("consumers: %s: %w", r.cfg.Group, err)
	}
	defer group.Close()
	for attempt := 0; ; {
		gen, err := group.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.log.Warn("joining consumer group failed; retrying", "err", err)
			if !sleep(ctx, r.backoff(attempt)) {
				return nil
			}
			attempt++
			continue
		}
		attempt = 0
		r.startGeneration(ctx, gen)
	}
}

// readPartitions reads the topic's partition count into r.partitions,
// trying again until it can or ctx ends (false).
func (r *Runner[E]) readPartitions(ctx context.Context) bool {
	client, done := topics.NewClient(r.cfg.Brokers, r.cfg.Security, 10*time.Second)
	defer done()
	for attempt := 0; ; attempt++ {
		n, err := topics.PartitionCount(ctx, client, r.cfg.Topic)
		if err == nil {
			r.partitions = n
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		r.log.Warn("reading the topic's partition count failed; retrying", "err", err)
		if !sleep(ctx, r.backoff(attempt)) {
			return false
		}
	}
}

func (r *Runner[E]) startGeneration(ctx context.Context, gen *kafka.Generation) {
	assigned := gen.Assignments[r.cfg.Topic]
	r.mu.Lock()
	r.joined = true
	r.lag, r.caught = map[int]int64{}, map[int]bool{}
	for _, a := range assigned {
		r.lag[a.ID] = -1
	}
	r.mu.Unlock()
	r.cfg.Metrics.ForgetLag(r.cfg.Group)
	r.log.Info("assigned partitions", "generation", gen.ID, "partitions", len(assigned))
	gc := &groupCommits{commit: gen.CommitOffsets, topic: r.cfg.Topic, interval: r.cfg.CommitInterval, log: r.log}
	gen.Start(gc.run)

	var stored map[int]int64
	if r.cfg.Offsets != nil {
		var ok bool
		if stored, ok = r.savedOffsets(ctx); !ok {
			return
		}
	}
	for _, a := range assigned {
		part := a.ID
		if r.cfg.Offsets == nil {
			gen.Start(func(ctx context.Context) { r.consume(ctx, gc, part, a.Offset, -1) })
			continue
		}
		gen.Start(func(ctx context.Context) { r.consumeSaved(ctx, gc, part, stored) })
	}
}

// savedOffsets reads the positions saved next to the state, retrying until
// it can or ctx ends.
func (r *Runner[E]) savedOffsets(ctx context.Context) (map[int]int64, bool) {
	for attempt := 0; ; attempt++ {
		stored, err := r.cfg.Offsets.Offsets(ctx, r.cfg.Group, r.cfg.Topic)
		if err == nil {
			return stored, true
		}
		r.log.Warn("reading saved offsets failed; retrying", "err", err)
		if !sleep(ctx, r.backoff(attempt)) {
			return nil, false
		}
	}
}

// consumeSaved consumes a partition from its saved position, and again from
// the start whenever the saved position vanishes (the state was wiped).
func (r *Runner[E]) consumeSaved(ctx context.Context, gc *groupCommits, part int, stored map[int]int64) {
	for {
		start, pos := kafka.FirstOffset, int64(-1)
		if o, ok := stored[part]; ok {
			start, pos = o, o
		}
		if !r.consume(ctx, gc, part, start, pos) || ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.stats.Replays++
		r.caught[part] = false
		r.mu.Unlock()
		var ok bool
		if stored, ok = r.savedOffsets(ctx); !ok {
			return
		}
		from, ok := stored[part]
		if !ok {
			from = -1 // the start
		}
		r.log.Warn("the state next to the saved position was lost (Redis restarted without persistence or from an older snapshot, failed over, or another consumer saved the position, or chatctl moved it: a consumer-groups reset or a rebuild); going on from what is saved",
			"partition", part, "from", from)
	}
}

func (r *Runner[E]) backoff(attempt int) time.Duration {
	d := r.cfg.MinBackoff << min(attempt, 20)
	if d > r.cfg.MaxBackoff || d <= 0 {
		d = r.cfg.MaxBackoff
	}
	return d/2 + rand.N(d/2+1) // jitter, so restarting consumers do not retry in step
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
