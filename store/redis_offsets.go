package store

import (
	"context"
	"fmt"
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
	if len(next) == 0 {
		return nil
	}
	fields := make([]any, 0, 4*len(next))
	for part, off := range next {
		fields = append(fields, offsetField(topic, part), off, originField(topic, part), originNext)
	}
	if err := r.client.HSet(ctx, offsetsKey(consumer), fields...).Err(); err != nil {
		return fmt.Errorf("store: save offsets of %q on %q: %w", consumer, topic, err)
	}
	return nil
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
