package store

import (
	"context"
	"errors"
	"fmt"

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

// CheckFence reports whether f's position is there: nil when it is,
// ErrStateLost when Redis lost it (and with it the state next to it), or
// the error reading it.
func (r *Redis) CheckFence(ctx context.Context, f Fence) error { return r.verify(ctx, &f) }

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
