package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Offsets returns the next offset to read of each partition of topic that
// consumer has saved. A missing partition was never consumed: start it
// from the beginning. A consumer may save -2 (kafka-go's FirstOffset) to
// claim a partition it starts from the beginning.
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
// every record before those offsets is durable. A position set by hand
// starts its partition's state afresh: the next record handled is its
// origin (see Origin).
func (r *Redis) SaveOffsets(ctx context.Context, consumer, topic string, next map[int]int64) error {
	return r.saveOffsets(ctx, consumer, topic, next, false)
}

// ResetOffsets is SaveOffsets for a position set by hand (a consumer-group
// reset): a position set back keeps, in Handled, the highest one it had
// before; one set forward, the records it skips.
func (r *Redis) ResetOffsets(ctx context.Context, consumer, topic string, next map[int]int64) error {
	return r.saveOffsets(ctx, consumer, topic, next, true)
}

func (r *Redis) saveOffsets(ctx context.Context, consumer, topic string, next map[int]int64, reset bool) error {
	if len(next) == 0 {
		return nil
	}
	parts := slices.Sorted(maps.Keys(next))
	var was []any
	if reset {
		names := make([]string, 0, 2*len(parts))
		for _, part := range parts {
			names = append(names, offsetField(topic, part), handledField(topic, part))
		}
		var err error
		if was, err = r.client.HMGet(ctx, offsetsKey(consumer), names...).Result(); err != nil {
			return fmt.Errorf("store: save offsets of %q on %q: %w", consumer, topic, err)
		}
	}
	fields := make([]any, 0, 6*len(next))
	for i, part := range parts {
		off := next[part]
		fields = append(fields, offsetField(topic, part), off, originField(topic, part), originNext)
		if !reset {
			continue
		}
		cur := savedNumber(was[2*i])
		s, _ := was[2*i+1].(string)
		h := parseHandled(s)
		switch {
		case cur >= 0 && cur > off: // set back: what lies below cur was handled
			h.End = max(h.End, cur)
		case off > max(cur, 0): // set forward: what lies between is not
			from, to := max(cur, 0), off
			if h.SkipTo > h.SkipFrom {
				from, to = min(from, h.SkipFrom), max(to, h.SkipTo)
			}
			h.SkipFrom, h.SkipTo = from, to
		default:
			continue
		}
		fields = append(fields, handledField(topic, part), h.String())
	}
	if err := r.client.HSet(ctx, offsetsKey(consumer), fields...).Err(); err != nil {
		return fmt.Errorf("store: save offsets of %q on %q: %w", consumer, topic, err)
	}
	return nil
}

// savedNumber reads a field of HMGET as a number; -1 when absent or not
// one.
func savedNumber(v any) int64 {
	s, ok := v.(string)
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Handled is what a consumer had handled of a partition before its
// position was set by hand (SaveOffsets): every record below End but those
// from SkipFrom to SkipTo (exclusive), which a position set forward
// skipped (the hull of all such skips). A replay's second handling of the
// records it covers may leave out what their first did once for good (the
// projectors' corrections).
type Handled struct {
	End              int64 // -1: none
	SkipFrom, SkipTo int64 // SkipTo <= SkipFrom: none
}

// Covers reports whether every record from first to last was handled.
func (h Handled) Covers(first, last int64) bool {
	return last < h.End && !(h.SkipTo > h.SkipFrom && first < h.SkipTo && last >= h.SkipFrom)
}

func (h Handled) String() string {
	return strconv.FormatInt(h.End, 10) + ":" + strconv.FormatInt(h.SkipFrom, 10) + ":" + strconv.FormatInt(h.SkipTo, 10)
}

// parseHandled reads Handled's String, or a plain End with no skip, as
// chatctl wrote it before skips were kept (a reset by an older chatctl,
// then an upgrade); a value it cannot read is none.
func parseHandled(s string) Handled {
	none := Handled{End: -1}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return Handled{End: n}
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return none
	}
	var v [3]int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return none
		}
		v[i] = n
	}
	return Handled{End: v[0], SkipFrom: v[1], SkipTo: v[2]}
}

// Handled returns what consumer had handled of partition part of topic
// before its position was last set by hand (End -1: nothing known).
func (r *Redis) Handled(ctx context.Context, consumer, topic string, part int) (Handled, error) {
	v, err := r.client.HGet(ctx, offsetsKey(consumer), handledField(topic, part)).Result()
	if errors.Is(err, redis.Nil) {
		return Handled{End: -1}, nil
	}
	if err != nil {
		return Handled{End: -1}, fmt.Errorf("store: handled of %q on %s/%d: %w", consumer, topic, part, err)
	}
	return parseHandled(v), nil
}

// advanceOffsetScript sets a saved position only if it still holds what the
// caller saved last. KEYS[1] the consumer's hash; ARGV field, expected (""
// for none), new value. It returns 1 when set, 0 when the position moved.
var advanceOffsetScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if (ARGV[2] == '' and not cur) or cur == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
`)

// AdvanceOffset moves consumer's saved position in partition part of topic
// from from to to, but only if the saved position is still from (from -1:
// only if none is saved; other negative values are positions like any). It reports false, saving nothing, when the
// position moved under the caller: Redis lost its data (restarted without
// persistence, flushed), so the state next to the position is gone and the
// consumer must replay from what is saved now.
func (r *Redis) AdvanceOffset(ctx context.Context, consumer, topic string, part int, from, to int64) (bool, error) {
	want := ""
	if from != -1 {
		want = strconv.FormatInt(from, 10)
	}
	n, err := advanceOffsetScript.Run(ctx, r.client, []string{offsetsKey(consumer)}, offsetField(topic, part), want, to).Int()
	if err != nil {
		return false, fmt.Errorf("store: advance offset of %q on %s/%d: %w", consumer, topic, part, err)
	}
	return n == 1, nil
}
