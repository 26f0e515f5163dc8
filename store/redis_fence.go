package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrStateLost says that a consumer's saved position vanished under it:
// Redis lost its data (restarted without persistence, flushed), so the
// state next to the position is gone too. The consumer must stop, writing
// nothing more, and replay from what is saved now.
var ErrStateLost = errors.New("store: the consumer's saved position is gone (Redis lost its data); replay from the start")

// Fence names the saved position (see AdvanceOffset) that a consumer's
// writes build on. A consumer that saves its position next to its state
// claims the position before it writes anything, so as long as the
// position exists, so does the state. Writes given a fence check it in the
// same pipeline and fail with ErrStateLost when it is gone.
//
// Without it, a consumer would go on writing the batch in hand into a
// wiped Redis until its next commit or state check noticed (up to seconds):
// a group's window holding only messages after the wipe, with no floor,
// looks like the group's whole history, and a pull would skip what came
// before.
type Fence struct {
	Consumer, Topic string
	Partition       int
}

// check queues the fence's test on p; nil when f is nil.
func (f *Fence) check(ctx context.Context, p redis.Pipeliner) *redis.BoolCmd {
	if f == nil {
		return nil
	}
	return p.HExists(ctx, offsetsKey(f.Consumer), offsetField(f.Topic, f.Partition))
}

// held reports the outcome of check: nil while the position exists,
// ErrStateLost once it is gone, or the error reading it.
func (f *Fence) held(cmd *redis.BoolCmd) error {
	if cmd == nil {
		return nil
	}
	ok, err := cmd.Result()
	if err != nil {
		return fmt.Errorf("fence of %s on %s/%d: %w", f.Consumer, f.Topic, f.Partition, err)
	}
	if !ok {
		return fmt.Errorf("%s on %s/%d: %w", f.Consumer, f.Topic, f.Partition, ErrStateLost)
	}
	return nil
}

// verify checks the fence in a round trip of its own.
func (r *Redis) verify(ctx context.Context, f *Fence) error {
	if f == nil {
		return nil
	}
	var cmd *redis.BoolCmd
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = f.check(ctx, p)
		return nil
	})
	if err != nil && cmd.Err() == nil {
		return fmt.Errorf("fence of %s on %s/%d: %w", f.Consumer, f.Topic, f.Partition, err)
	}
	return f.held(cmd)
}

// undo deletes keys written by a fenced call that found its fence gone
// after writing: they went into the wiped Redis, where they are the only
// state and would pass for a complete one. One DEL per key, pipelined, so
// that keys of different slots are fine on a cluster.
func (r *Redis) undo(ctx context.Context, keys []string) error {
	return r.execPipe(ctx, func(p redis.Pipeliner) {
		for _, k := range keys {
			p.Del(ctx, k)
		}
	})
}

// ErrReplaying says that a consumer has not yet replayed its topic into
// the state since it claimed or found its position there (see
// MarkReplayed): what the state lacks may be on its way.
var ErrReplaying = errors.New("store: the consumer has not replayed its topic into Redis yet; retry in a few seconds")

// markScript sets a mark beside a partition's position (the replay mark),
// but only while the position is saved: a mark written into a Redis wiped
// under its consumer would vouch for a state that is not there.
// KEYS[1] the consumer's hash; ARGV the position's field, the mark's field,
// its value.
var markScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  return 1
end
return 0
`)

// MarkReplayed records, next to consumer's position in partition part of
// topic, that its state holds every record the partition had when the
// consumer last caught up with it. It lives and dies with the position:
// Redis losing its data takes both, and the consumer, replaying, marks
// again once it has caught up. It reports false, marking nothing, when the
// position is not saved.
func (r *Redis) MarkReplayed(ctx context.Context, consumer, topic string, part int) (bool, error) {
	n, err := markScript.Run(ctx, r.client, []string{offsetsKey(consumer)}, offsetField(topic, part), replayedField(topic, part), "1").Int()
	if err != nil {
		return false, fmt.Errorf("store: mark %q replayed on %s/%d: %w", consumer, topic, part, err)
	}
	return n == 1, nil
}

// CheckReplayed reports whether consumer's state holds what partition part
// of topic held when it last caught up: nil when it does, ErrReplaying
// when not yet (Redis lost its data and the consumer is replaying, or has
// not noticed yet), or the error reading it. A reader that finds nothing
// in the state tells "nothing there" from "not replayed yet" by it.
func (r *Redis) CheckReplayed(ctx context.Context, consumer, topic string, part int) error {
	f := &Fence{Consumer: consumer, Topic: topic, Partition: part}
	return f.replayed(f.checkReplayed(ctx, r.client))
}

// checkReplayed queues the test of f's replay mark (MarkReplayed) on c,
// so that a read of the state f guards can be checked in its own round
// trip; nil when f is nil.
func (f *Fence) checkReplayed(ctx context.Context, c redis.Cmdable) *redis.BoolCmd {
	if f == nil {
		return nil
	}
	return c.HExists(ctx, offsetsKey(f.Consumer), replayedField(f.Topic, f.Partition))
}

// replayed reports the outcome of checkReplayed: nil when the mark is
// there (or f is nil), ErrReplaying when not, or the error reading it.
func (f *Fence) replayed(cmd *redis.BoolCmd) error {
	if cmd == nil {
		return nil
	}
	ok, err := cmd.Result()
	switch {
	case err != nil:
		return fmt.Errorf("store: replay mark of %q on %s/%d: %w", f.Consumer, f.Topic, f.Partition, err)
	case !ok:
		return fmt.Errorf("%s on %s/%d: %w", f.Consumer, f.Topic, f.Partition, ErrReplaying)
	}
	return nil
}

// CheckAllReplayed is CheckReplayed of partitions 0 to parts-1 of topic, in
// one round trip: for a reader whose answer rests on every partition (a
// user's groups lie in all of them).
func (r *Redis) CheckAllReplayed(ctx context.Context, consumer, topic string, parts int) error {
	fields := make([]string, parts)
	for i := range fields {
		fields[i] = replayedField(topic, i)
	}
	vals, err := r.client.HMGet(ctx, offsetsKey(consumer), fields...).Result()
	if err != nil {
		return fmt.Errorf("store: replay marks of %q on %s: %w", consumer, topic, err)
	}
	for i, v := range vals {
		if v == nil {
			return fmt.Errorf("%s on %s/%d: %w", consumer, topic, i, ErrReplaying)
		}
	}
	return nil
}

// Origin is where a consumer's state of a partition began: the offset of the
// first record it handled from a claimed start (see AdvanceOffset), and
// that record's sent_at (unix ms). Offset 0: the state holds every record
// the partition ever had.
type Origin struct {
	Offset, SentAt int64
}

// originScript sets a partition's origin, but only while the partition's
// position is still the one the caller started from: a position gone (a
// wipe) or set by hand since (SaveOffsets) must not get the origin of the
// run it ended. KEYS[1] the consumer's hash; ARGV the position's field, the
// position started from, the origin's field, its value.
var originScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
return 1
`)

// SaveOrigin records, next to the fenced position, where the consumer's
// state of the partition began, so that a restart knows it without a
// replay. at is the position the consumer started from, which it has not
// moved yet: when the saved position is no longer at (Redis lost its data,
// or the position was set by hand since), it saves nothing and fails with
// ErrStateLost, and the consumer goes on from what is saved now. The origin
// lives and dies with the position, like the replay mark; a position set by
// hand (SaveOffsets) makes the next record handled the origin.
func (r *Redis) SaveOrigin(ctx context.Context, f Fence, at int64, o Origin) error {
	v := strconv.FormatInt(o.Offset, 10) + ":" + strconv.FormatInt(o.SentAt, 10)
	n, err := originScript.Run(ctx, r.client, []string{offsetsKey(f.Consumer)},
		offsetField(f.Topic, f.Partition), strconv.FormatInt(at, 10), originField(f.Topic, f.Partition), v).Int()
	if err != nil {
		return fmt.Errorf("store: save the origin of %s on %s/%d: %w", f.Consumer, f.Topic, f.Partition, err)
	}
	if n == 0 {
		return fmt.Errorf("%s on %s/%d: the position is no longer %d: %w", f.Consumer, f.Topic, f.Partition, at, ErrStateLost)
	}
	return nil
}

// originNext is the origin SaveOffsets leaves: the next record handled.
const originNext = "next"

// Origin returns what SaveOrigin recorded for the fenced partition. next
// says that the position was set by hand since (SaveOffsets): the state no
// longer follows from where it began, and the next record handled is to be
// saved as its origin, as after a claimed start. Neither (o nil, next
// false): a state written before origins were kept.
func (r *Redis) Origin(ctx context.Context, f Fence) (o *Origin, next bool, err error) {
	v, err := r.client.HGet(ctx, offsetsKey(f.Consumer), originField(f.Topic, f.Partition)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("store: the origin of %s on %s/%d: %w", f.Consumer, f.Topic, f.Partition, err)
	case v == originNext:
		return nil, true, nil
	}
	off, at, found := strings.Cut(v, ":")
	o = &Origin{}
	o.Offset, err = strconv.ParseInt(off, 10, 64)
	if err == nil && found {
		o.SentAt, err = strconv.ParseInt(at, 10, 64)
	}
	if err != nil || !found || o.Offset < 0 {
		return nil, false, fmt.Errorf("store: the origin of %s on %s/%d: %w: %q", f.Consumer, f.Topic, f.Partition, ErrCorruptValue, v)
	}
	return o, false, nil
}
