package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/store"
)

// consume reads one partition from start until ctx ends (rebalance or
// shutdown). It never skips a record it could not make durable. With an
// OffsetStore, pos is the position saved for the partition (-1: none); when
// it vanishes or moves under the runner, or the store's servers change
// (state.go), consume returns lost.
func (r *Runner[E]) consume(ctx context.Context, gc *groupCommits, part int, start, pos int64) (lost bool) {
	log := r.log.With("partition", part)
	var saved savedPos
	saved.Store(pos)
	saved.asked.Store(pos)
	var gone atomic.Bool
	if r.cfg.Offsets != nil && !r.fingerprint(ctx, log, &saved) {
		return false // ctx ended
	}
	if r.cfg.Offsets != nil && pos == -1 {
		// Nothing saved: claim the partition's start before handling a
		// record, so that every later save names a position to find and a
		// state wiped after the first batch cannot pass for one never
		// written.
		if !r.claimStart(ctx, log, part, &saved) {
			return saved.Load() == lostPos
		}
	}
	if s, ok := r.cfg.Handler.(Starter); ok && r.cfg.Offsets != nil {
		s.Start(part, saved.Load())
	}
	if r.cfg.Offsets != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go r.watchSaved(ctx, log, part, &saved, &gone, cancel)
	}
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:         r.cfg.Brokers,
		Dialer:          r.cfg.Security.Dialer(),
		Topic:           r.cfg.Topic,
		Partition:       part,
		MinBytes:        1,
		MaxBytes:        16 << 20,
		MaxWait:         r.cfg.MaxWait,
		QueueCapacity:   min(r.cfg.BatchSize, 1024),
		ReadLagInterval: -1,
		ErrorLogger:     kafka.LoggerFunc(func(f string, a ...any) { log.Debug(fmt.Sprintf(f, a...)) }),
	})
	defer reader.Close()
	if err := reader.SetOffset(start); err != nil {
		log.Error("cannot position reader", "offset", start, "err", err)
		return false
	}
	log.Debug("consuming", "from", start)
	lag, err := reader.ReadLag(ctx)
	if err == nil && lag < 0 {
		// Records below the saved position were never handled here: they
		// came after the topic was recreated or its log cut back (a broker
		// that lost its tail). Waiting for the log to pass the position
		// would skip them without a word.
		log.Error("the saved position is past the end of the partition: the topic was recreated or its log lost its tail; handling it again from its start, onto the state as it is; if the state came from the old log, rebuild it (docs/operations.md, \"One projection is wrong\")",
			"saved", start, "end", start+lag)
		if err := reader.SetOffset(kafka.FirstOffset); err != nil {
			log.Error("cannot position reader", "offset", "first", "err", err)
			return false
		}
		lag, err = reader.ReadLag(ctx)
	}
	if start >= 0 {
		r.checkRetained(ctx, log, part, start)
	}
	marked := false // the partition's replay mark is written
	if err == nil && lag <= 0 {
		// Nothing to replay: the state is current. Marked before it is
		// called caught up, so that a reader who waited for readiness finds
		// the mark (the gateway's checks of a rebuild read it).
		if marked = r.markReplayed(ctx, log, part); !marked {
			return false // ctx ended
		}
		r.markCaughtUp(part)
	}
	// The buffers grow to the batches that come: a partition that sees one
	// record at a time keeps small ones. (Full-size buffers on every
	// partition of every consumer made a heap of hundreds of MB the
	// garbage collector paced itself by, so garbage piled up in RSS.)
	batch := make([]kafka.Message, 0, min(r.cfg.BatchSize, 64))
	recs := make([]Record[E], 0, cap(batch))
	var (
		applied int64     = -1 // next offset after the last handled batch
		due     time.Time      // when applied must be saved and committed by
	)
	defer func() {
		if applied >= 0 && applied > saved.Load() && !gone.Load() { // leaving: save what was done, best effort
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			r.commit(fctx, log, gc, part, &saved, applied, true)
		}
	}()
	for {
		var err error
		batch, err = r.fetch(ctx, reader, batch[:0], due)
		if errors.Is(err, errCommitDue) {
			if !r.commit(ctx, log, gc, part, &saved, applied, false) {
				return gone.Load() || saved.Load() == lostPos
			}
			due = r.nextDue(saved.Load(), applied)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("fetch failed", "err", err)
			}
			return gone.Load()
		}
		recs = recs[:0]
		for _, m := range batch {
			e, err := r.cfg.Decode(m.Value)
			if err == nil && r.cfg.Misfiled != nil {
				err = r.cfg.Misfiled(&e, m.Key, part, r.partitions)
			}
			if err != nil {
				if !r.deadLetter(ctx, log, m, err) {
					return gone.Load()
				}
				continue
			}
			recs = append(recs, Record[E]{Partition: part, Offset: m.Offset, Time: m.Time, Event: e, End: m.HighWaterMark})
		}
		if ok, lost := r.handle(ctx, log, part, recs); !ok {
			if lost {
				gone.Store(true)
			}
			return gone.Load()
		}
		applied = batch[len(batch)-1].Offset + 1
		now := time.Now()
		if due.IsZero() {
			due = now.Add(r.cfg.CommitInterval)
		}
		if !now.Before(due) {
			if !r.commit(ctx, log, gc, part, &saved, applied, false) {
				return gone.Load() || saved.Load() == lostPos
			}
			due = r.nextDue(saved.Load(), applied)
		}
		lag := reader.Lag()
		if lag <= 0 && !marked {
			if marked = r.markReplayed(ctx, log, part); !marked {
				return gone.Load() // ctx ended
			}
		}
		r.mu.Lock()
		r.lag[part] = lag
		if lag <= 0 {
			r.caught[part] = true // after the mark, as above
		}
		r.stats.Records += int64(len(recs))
		r.stats.Batches++
		r.mu.Unlock()
		r.cfg.Metrics.Consumed(r.cfg.Group, len(recs))
		r.cfg.Metrics.Lag(r.cfg.Group, part, lag)
	}
}

// markReplayed marks part replayed when the OffsetStore keeps such marks
// (ReplayMarker), retrying until it can or ctx ends (it then reports
// false). A position gone meanwhile marks nothing; the runner notices the
// loss by itself and replays.
func (r *Runner[E]) markReplayed(ctx context.Context, log *slog.Logger, part int) bool {
	m, ok := r.cfg.Offsets.(ReplayMarker)
	if !ok {
		return true
	}
	_, ok = r.retry(ctx, func() error {
		_, err := m.MarkReplayed(ctx, r.cfg.Group, r.cfg.Topic, part)
		return err
	}, func(attempt int, retryIn time.Duration, err error) {
		log.Warn("marking the partition replayed failed; retrying", "attempt", attempt+1, "retry_in", retryIn, "err", err)
	})
	return ok
}

// errCommitDue ends a fetch that waited until handled batches were due
// for their commit.
var errCommitDue = errors.New("consumers: commit due")

// fetch blocks for one record, then takes whatever else is already there,
// up to BatchSize records and BatchBytes of keys and values, waiting at
// most Linger for records known to exist.
// With a due time set, it returns errCommitDue if nothing came by then.
func (r *Runner[E]) fetch(ctx context.Context, reader *kafka.Reader, batch []kafka.Message, due time.Time) ([]kafka.Message, error) {
	fctx := ctx
	if !due.IsZero() {
		var cancel context.CancelFunc
		fctx, cancel = context.WithDeadline(ctx, due)
		defer cancel()
	}
	m, err := reader.FetchMessage(fctx)
	if err != nil {
		if ctx.Err() == nil && fctx.Err() != nil {
			return batch, errCommitDue
		}
		return batch, err
	}
	batch = append(batch, m)
	size := len(m.Key) + len(m.Value)
	// More is there when the broker said so at the last fetch (lag) or
	// when the reader holds records already fetched: a trickle fetched a
	// record at a time reports no lag, yet piles up in the reader's queue
	// while a slow Handle runs, and must not then be handed over one
	// record per Handle.
	more := func() bool { return reader.Lag() > 0 || reader.Stats().QueueLength > 0 }
	if !more() {
		return batch, nil // caught up once handled (consume)
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.Linger)
	defer cancel()
	for len(batch) < r.cfg.BatchSize && size < r.cfg.BatchBytes && more() {
		m, err := reader.FetchMessage(lctx)
		if err != nil {
			if ctx.Err() != nil {
				return batch, err
			}
			break // linger over: hand what we have
		}
		batch = append(batch, m)
		size += len(m.Key) + len(m.Value)
	}
	return batch, nil
}

func (r *Runner[E]) markCaughtUp(part int) {
	r.mu.Lock()
	r.lag[part] = 0
	r.caught[part] = true
	r.mu.Unlock()
	r.cfg.Metrics.Lag(r.cfg.Group, part, 0)
}

// handle retries Handle with back-off until it succeeds or ctx ends. A
// Handle that found its state wiped (store.ErrStateLost) is not retried:
// handle reports lost, and the partition replays from what is saved now.
func (r *Runner[E]) handle(ctx context.Context, log *slog.Logger, part int, recs []Record[E]) (ok, lost bool) {
	if len(recs) == 0 {
		return true, false
	}
	retries, ok := r.retry(ctx, func() error {
		err := r.cfg.Handler.Handle(ctx, part, recs)
		if errors.Is(err, store.ErrStateLost) {
			lost = true
			return errStop
		}
		return err
	}, func(attempt int, d time.Duration, err error) {
		log.Warn("batch failed; retrying without committing", "records", len(recs),
			"first_offset", recs[0].Offset, "attempt", attempt+1, "retry_in", d, "err", err)
	})
	if lost {
		log.Warn("the state was wiped under the batch; replaying from what is saved", "first_offset", recs[0].Offset)
		return false, true
	}
	if ok && retries > 0 {
		log.Info("batch applied after retries", "retries", retries)
	}
	return ok, false
}

// errStop ends retry at once, as a failure.
var errStop = errors.New("consumers: stop retrying")

// retry calls fn until it succeeds or ctx ends, counting each failure and
// telling failed about it before a back-off. It reports the failures and
// whether fn succeeded.
func (r *Runner[E]) retry(ctx context.Context, fn func() error, failed func(attempt int, retryIn time.Duration, err error)) (int, bool) {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil {
			return attempt, true
		}
		if err == errStop || ctx.Err() != nil {
			return attempt, false
		}
		r.mu.Lock()
		r.stats.Retries++
		r.mu.Unlock()
		r.cfg.Metrics.Retried(r.cfg.Group)
		d := r.backoff(attempt)
		failed(attempt, d, err)
		if !sleep(ctx, d) {
			return attempt, false
		}
	}
}

// deadLetter copies a poison record to chat.deadletter, retrying until the
// copy is durable, so skipping the record loses nothing.
func (r *Runner[E]) deadLetter(ctx context.Context, log *slog.Logger, m kafka.Message, cause error) bool {
	log.Warn("poison record sent to the dead-letter topic", "offset", m.Offset, "err", cause)
	for attempt := 0; ; attempt++ {
		err := r.cfg.DeadLetter.DeadLetter(ctx, m, r.cfg.Group, cause)
		if err == nil {
			r.mu.Lock()
			r.stats.DeadLettered++
			r.mu.Unlock()
			r.cfg.Metrics.DeadLettered(r.cfg.Topic)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("dead-letter write failed; retrying", "offset", m.Offset, "err", err)
		if !sleep(ctx, r.backoff(attempt)) {
			return false
		}
	}
}

// commit saves the position next to the state (when the consumer keeps it
// there), from the one saved last, and then commits it to the group (with
// the generation's next group commit, or at once when final). A
// saved position that moved means the state was wiped, and servers that
// changed mean it may have been rolled back: commit returns false with
// saved set to lostPos.
func (r *Runner[E]) commit(ctx context.Context, log *slog.Logger, gc *groupCommits, part int, saved *savedPos, next int64, final bool) bool {
	if f, ok := r.cfg.Handler.(Flusher); ok {
		if !r.flush(ctx, log, f, final) {
			return false
		}
		if next = min(next, f.Durable(part)); next <= saved.Load() {
			return true // nothing new is durable yet: the next due time retries
		}
	}
	if r.cfg.Offsets != nil {
		saved.asked.Store(next)
		for attempt := 0; ; attempt++ {
			// Checked before every attempt: a save that failed because
			// Redis was down must not succeed on the Redis that came back.
			changed, err := r.serverChanged(ctx, log, saved)
			ok := !changed
			if err == nil && !changed {
				ok, err = r.cfg.Offsets.AdvanceOffset(ctx, r.cfg.Group, r.cfg.Topic, part, saved.Load(), next)
			}
			if err == nil && !ok {
				saved.Store(lostPos)
				return false
			}
			if err == nil {
				saved.Store(next)
				break
			}
			if ctx.Err() != nil {
				return false
			}
			log.Warn("saving offset failed; retrying", "offset", next, "err", err)
			if !sleep(ctx, r.backoff(attempt)) {
				return false
			}
		}
	} else {
		saved.Store(next) // what Kafka is told: an idle partition is not committed again
	}
	gc.add(part, next, final)
	r.mu.Lock()
	r.stats.Commits++
	r.mu.Unlock()
	return ctx.Err() == nil
}

// flush retries f.Flush with back-off until it succeeds or ctx ends.
func (r *Runner[E]) flush(ctx context.Context, log *slog.Logger, f Flusher, force bool) bool {
	_, ok := r.retry(ctx, func() error { return f.Flush(ctx, force) }, func(attempt int, d time.Duration, err error) {
		log.Warn("writing buffered rows failed; retrying without committing", "attempt", attempt+1, "retry_in", d, "err", err)
	})
	return ok
}

// nextDue is when a partition commits next: an interval from now while
// handled records are not all saved (their effect was not durable yet at
// the last commit), else when the next batch is handled.
func (r *Runner[E]) nextDue(saved, applied int64) time.Time {
	if applied >= 0 && saved < applied {
		d := r.cfg.CommitInterval
		if d <= 0 {
			d = flushGap
		}
		return time.Now().Add(d)
	}
	return time.Time{}
}

// claimStart saves kafka.FirstOffset as the position of a partition that
// has none, retrying until it can or ctx ends. It reports false when ctx
// ended or someone saved a position first (saved is then lostPos).
func (r *Runner[E]) claimStart(ctx context.Context, log *slog.Logger, part int, saved *savedPos) bool {
	saved.asked.Store(kafka.FirstOffset)
	for attempt := 0; ; attempt++ {
		ok, err := r.cfg.Offsets.AdvanceOffset(ctx, r.cfg.Group, r.cfg.Topic, part, -1, kafka.FirstOffset)
		if err == nil && !ok {
			saved.Store(lostPos)
			return false
		}
		if err == nil {
			saved.Store(kafka.FirstOffset)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("claiming the partition's start failed; retrying", "err", err)
		if !sleep(ctx, r.backoff(attempt)) {
			return false
		}
	}
}
