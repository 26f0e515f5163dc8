package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/groupchat/chatd/topics"
)

// span is the records of one partition to read: offsets in [from, to).
type span struct {
	part     int
	from, to int64
}

// spans returns the spans from each partition's log start (or from, when
// given and later) to its end as it is now: a replay reads what was there
// when it started.
func (a *admin) spans(ctx context.Context, topic string, from map[int]int64) ([]span, int64, error) {
	parts, err := a.partitions(ctx, topic)
	if err != nil {
		return nil, 0, err
	}
	b, err := a.bounds(ctx, topic, parts)
	if err != nil {
		return nil, 0, err
	}
	var out []span
	var total int64
	for _, p := range parts {
		s := span{part: p, from: b[p].first, to: b[p].end}
		if o, ok := from[p]; ok && o > s.from {
			s.from = min(o, s.to)
		}
		out = append(out, s)
		total += s.to - s.from
	}
	return out, total, nil
}

// fetchDeadline bounds one fetch from a partition's leader.
var fetchDeadline = 30 * time.Second

// scanConfig says how to read spans.
type scanConfig struct {
	brokers  []string
	sec      topics.Security
	topic    string
	batch    int                                       // records per call of fn; default 50000
	parallel int                                       // partitions read at once; default 4
	follow   bool                                      // wait for new records at the end instead of stopping
	spanDone func(ctx context.Context, part int) error // after a span's last call of fn
	// onRecords is told, after each call of fn, how many records it had and
	// how many offsets the span advanced (more than the records on a
	// compacted topic); at the span's end, the offsets left (0 records).
	onRecords func(records int, offsets int64)
	// onSkip is told of offsets [from, to) of a partition that retention
	// (or compaction moving the log start) removed while the scan ran:
	// they are not read.
	onSkip func(part int, from, to int64)
}

// scan reads every span and calls fn with its records in offset order, up
// to cfg.batch at a time. Calls for one partition never overlap; calls for
// different partitions run concurrently. fn must not keep msgs.
func scan(ctx context.Context, cfg scanConfig, spans []span, fn func(ctx context.Context, part int, msgs []kafka.Message) error) error {
	if cfg.batch <= 0 {
		cfg.batch = 50000
	}
	if cfg.parallel <= 0 {
		cfg.parallel = 4
	}
	// Big partitions first, so the last ones to finish are short.
	spans = append([]span(nil), spans...)
	sort.Slice(spans, func(i, j int) bool { return spans[i].to-spans[i].from > spans[j].to-spans[j].from })
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.parallel)
	for _, s := range spans {
		g.Go(func() error {
			if s.to <= s.from {
				// nothing to read
			} else if err := scanOne(gctx, cfg, s, fn); err != nil {
				return err
			}
			if cfg.spanDone != nil {
				return cfg.spanDone(gctx, s.part)
			}
			return nil
		})
	}
	return g.Wait()
}

func scanOne(ctx context.Context, cfg scanConfig, s span, fn func(ctx context.Context, part int, msgs []kafka.Message) error) error {
	conn, err := dialLeader(ctx, cfg.brokers, cfg.sec, cfg.topic, s.part)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	pos := s.from // the next offset not yet handed on or skipped
	// skipTo moves past what the log no longer holds, when its start has
	// passed pos; it reports whether it did.
	skipTo := func() (bool, error) {
		first, err := conn.ReadFirstOffset()
		if err != nil || first <= pos {
			return false, err
		}
		first = min(first, s.to)
		if cfg.onSkip != nil {
			cfg.onSkip(s.part, pos, first)
		}
		if cfg.onRecords != nil {
			cfg.onRecords(0, first-pos)
		}
		pos = first
		_, err = conn.Seek(pos, kafka.SeekAbsolute)
		return err == nil, err
	}
	if _, err := conn.Seek(pos, kafka.SeekAbsolute); err != nil {
		if skipped, serr := skipTo(); !skipped {
			return fmt.Errorf("%s/%d: position at %d: %w", cfg.topic, s.part, pos, cmp.Or(serr, err))
		}
	}
	batch := make([]kafka.Message, 0, cfg.batch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := fn(ctx, s.part, batch); err != nil {
			return err
		}
		next := batch[len(batch)-1].Offset + 1
		if cfg.onRecords != nil {
			cfg.onRecords(len(batch), next-pos)
		}
		pos = next
		batch = batch[:0]
		return nil
	}
	finish := func() error {
		if err := flush(); err != nil {
			return err
		}
		if cfg.onRecords != nil && s.to > pos {
			cfg.onRecords(0, s.to-pos) // compaction removed the span's tail
		}
		return nil
	}
	for {
		// One fetch, read straight off the connection: no per-record
		// hand-off between goroutines, which a kafka.Reader costs. fn runs
		// only between fetches, so however long it takes, it does not eat
		// into a fetch's read deadline.
		conn.SetReadDeadline(time.Now().Add(fetchDeadline))
		b := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: 32 << 20, MaxWait: 500 * time.Millisecond})
		got, done := 0, false
		for len(batch) < cap(batch) {
			m, err := b.ReadMessage()
			if err != nil {
				break
			}
			if m.Offset >= s.to {
				done = true
				break
			}
			got++
			batch = append(batch, m)
			if m.Offset >= s.to-1 {
				done = true
				break
			}
		}
		hwm := b.HighWaterMark()
		// Closing a batch read only in part discards the rest of the
		// fetch; the connection's offset is the next record not read.
		if err := b.Close(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, kafka.RequestTimedOut) { // timed out: nothing new within MaxWait
			if ctx.Err() != nil {
				return ctx.Err()
			}
			at, _ := conn.Offset()
			if errors.Is(err, kafka.OffsetOutOfRange) && got == 0 {
				if err := flush(); err != nil {
					return err
				}
				if skipped, serr := skipTo(); skipped {
					continue
				} else if serr != nil {
					err = serr
				}
			}
			return fmt.Errorf("%s/%d: read at %d: %w", cfg.topic, s.part, at, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		next, _ := conn.Offset()
		// Done at the span's end; or, when nothing came and the log ends
		// here, because compaction removed the span's tail.
		if done || (got == 0 && next >= hwm && !cfg.follow) {
			return finish()
		}
		if cfg.follow || got == 0 || len(batch) == cap(batch) {
			if err := flush(); err != nil { // a follower prints what it has
				return err
			}
		}
	}
}

// skipNotice returns an onSkip that tells w what was removed under a
// replay, and so is missing from its result (what).
func skipNotice(w io.Writer, topic, what string) func(part int, from, to int64) {
	return func(part int, from, to int64) {
		fmt.Fprintf(w, "%s/%d: offsets %d to %d were removed (retention or compaction) while they waited to be read; they are not in %s\n",
			topic, part, from, to-1, what)
	}
}

// dialLeader connects to the leader of a partition, bootstrapping from
// the first broker that answers.
func dialLeader(ctx context.Context, brokers []string, sec topics.Security, topic string, part int) (*kafka.Conn, error) {
	d := sec.Dialer()
	if d == nil {
		d = kafka.DefaultDialer
	}
	var err error
	for _, b := range brokers {
		var conn *kafka.Conn
		if conn, err = d.DialLeader(ctx, "tcp", b, topic, part); err == nil {
			return conn, nil
		}
	}
	return nil, fmt.Errorf("%s/%d: connect to its leader via %v: %w", topic, part, brokers, err)
}
