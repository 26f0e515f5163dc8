package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Offsets returns the next offset to read of each partition of topic that
// consumer has saved. A missing partition was never consumed: start it
// from the beginning.
func (r *Redis) Offsets(ctx context.Context, consumer, topic string) (map[int]int64, error) {
	h, err := r.client.HGetAll(ctx, offsetsKey(consumer)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: offsets of %q on %q: %w", consumer, topic, err)
	}
	next := make(map[int]int64)
	prefix := topic + "/"
	for field, v := range h {
		p, ok := strings.CutPrefix(field, prefix)
		if !ok {
			continue
		}
		part, err := strconv.Atoi(p)
		if err != nil {
			continue // another topic whose name extends this one's
		}
		off, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("store: offsets of %q on %q: %w: %s = %q", consumer, topic, ErrCorruptValue, field, v)
		}
		next[part] = off
	}
	return next, nil
}

// SaveOffsets records the next offset to read of the given partitions of
// topic; other partitions keep theirs. Call it only after the effect of
// every record before those offsets is durable.
func (r *Redis) SaveOffsets(ctx context.Context, consumer, topic string, next map[int]int64) error {
	if len(next) == 0 {
		return nil
	}
	fields := make([]any, 0, 2*len(next))
	for part, off := range next {
		fields = append(fields, offsetField(topic, part), off)
	}
	if err := r.client.HSet(ctx, offsetsKey(consumer), fields...).Err(); err != nil {
		return fmt.Errorf("store: save offsets of %q on %q: %w", consumer, topic, err)
	}
	return nil
}
