package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"
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

// scanConfig says how to read spans.
type scanConfig struct {
	brokers   []string
	topic     string
	batch     int  // records per call of fn; default 50000
	parallel  int  // partitions read at once; default 4
	follow    bool // wait for new records at the end instead of stopping
	onRecords func(n int)
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
		if s.to <= s.from {
			continue
		}
		g.Go(func() error { return scanOne(gctx, cfg, s, fn) })
	}
	return g.Wait()
}

func scanOne(ctx context.Context, cfg scanConfig, s span, fn func(ctx context.Context, part int, msgs []kafka.Message) error) error {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:         cfg.brokers,
		Topic:           cfg.topic,
		Partition:       s.part,
		MinBytes:        1,
		MaxBytes:        32 << 20,
		MaxWait:         200 * time.Millisecond,
		QueueCapacity:   8192,
		ReadLagInterval: -1,
	})
	defer r.Close()
	if err := r.SetOffset(s.from); err != nil {
		return fmt.Errorf("%s/%d: position at %d: %w", cfg.topic, s.part, s.from, err)
	}
	batch := make([]kafka.Message, 0, cfg.batch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := fn(ctx, s.part, batch); err != nil {
			return err
		}
		if cfg.onRecords != nil {
			cfg.onRecords(len(batch))
		}
		batch = batch[:0]
		return nil
	}
	for {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := r.FetchMessage(fctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) && r.Lag() <= 0 && !cfg.follow {
				// Nothing more to read (compaction removed the tail of
				// the span): the span is done.
				return flush()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if err := flush(); err != nil { // a follower prints what it has
					return err
				}
				continue
			}
			return fmt.Errorf("%s/%d: read at %d: %w", cfg.topic, s.part, r.Offset(), err)
		}
		if m.Offset >= s.to {
			return flush()
		}
		batch = append(batch, m)
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return err
			}
		}
		if m.Offset >= s.to-1 {
			return flush()
		}
	}
}
