package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors of the Redis store, wrapped with detail.
var (
	ErrInvalidConfig = errors.New("store: invalid config")
	ErrInvalidLimit  = errors.New("store: limit must be positive")
	ErrCorruptValue  = errors.New("store: corrupt value in redis")
)

// RedisConfig configures a Redis store. The zero value is the default.
type RedisConfig struct {
	// WindowSize is how many of each group's newest messages the window
	// keeps. Default 1000. -1 keeps every message: without ClickHouse the
	// window is the history.
	WindowSize int

	// DedupWindow is how far apart, by sent_at, two sends with the same
	// (gid, sender, client_msg_id) may be for the later one to be a
	// duplicate; a claim is kept in Redis that long. Default 24h. Redis
	// holds about 100 bytes per distinct client_msg_id within the window,
	// so lower it for high send rates, but keep it well above the longest
	// lag the persister may have: claims expire by the wall clock, so a
	// resend that the persister reaches after its first send's claim
	// expired (the gap between them plus the lag past the window) is kept
	// as a second message.
	DedupWindow time.Duration
}

func (c *RedisConfig) setDefaults() {
	if c.WindowSize == 0 {
		c.WindowSize = 1000
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 24 * time.Hour
	}
}

// Validate reports a config that cannot work. Zero fields are valid: they
// take their defaults.
func (c RedisConfig) Validate() error {
	if c.WindowSize < -1 {
		return fmt.Errorf("%w: WindowSize %d, want > 0, or -1 for unbounded", ErrInvalidConfig, c.WindowSize)
	}
	if c.DedupWindow < 0 || c.DedupWindow > 0 && c.DedupWindow < time.Millisecond {
		return fmt.Errorf("%w: DedupWindow %v, want at least 1ms", ErrInvalidConfig, c.DedupWindow)
	}
	return nil
}

// Redis is the Redis projection of the chat topics: the message window,
// send dedup claims, delivery and read cursors, membership and the
// projections' offsets. See the package doc for its concurrency rules.
type Redis struct {
	client redis.UniversalClient
	cfg    RedisConfig

	noSetNXGet atomic.Bool // the server rejected SET NX GET (Redis < 7.0)
	states     cursorBatch // CursorState calls in shared round trips
}

// NewRedis returns a store on client, which may be a single node or a
// cluster. It does not contact the server; call Ping for that.
func NewRedis(client redis.UniversalClient, cfg RedisConfig) (*Redis, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Redis{client: client, cfg: cfg}, nil
}

// Client returns the client the store was made with.
func (r *Redis) Client() redis.UniversalClient { return r.client }

// Ping checks that Redis answers.
func (r *Redis) Ping(ctx context.Context) error {
	if err := r.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("store: redis ping: %w", err)
	}
	return nil
}

// scriptCall is one run of a script: the keys (all of one slot) and args.
type scriptCall struct {
	keys []string
	args []any
}

// runScript runs s once per call, all calls in one pipeline (go-redis splits
// it by node on a cluster). It sends EVALSHA; when calls meet NOSCRIPT (a
// new, restarted or flushed server) it loads the script (on every master of
// a cluster) and sends those calls again, and as a last resort sends them
// with EVAL. Every script here is idempotent, so a retry is safe. The
// result has one Cmd per call; err is the first failure.
func (r *Redis) runScript(ctx context.Context, s *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	return r.runScriptAfter(ctx, nil, s, calls)
}

// runScriptAfter is runScript with the commands that before queues (reads,
// which a retry may repeat) ahead of the scripts in each attempt's
// pipeline; before may be nil.
func (r *Redis) runScriptAfter(ctx context.Context, before func(redis.Pipeliner), s *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.Cmd, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; len(todo) > 0; attempt++ {
		pipe := r.client.Pipeline()
		if before != nil {
			before(pipe)
		}
		for _, i := range todo {
			if attempt < 2 {
				cmds[i] = s.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
			} else {
				cmds[i] = s.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
			}
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
		missing := todo[:0]
		for _, i := range todo {
			if isNoScript(cmds[i].Err()) {
				missing = append(missing, i)
			}
		}
		todo = missing
		if len(todo) > 0 && attempt == 0 {
			_ = s.Load(ctx, r.client).Err() // on failure, the retries tell
		}
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return cmds, err
		}
	}
	return cmds, nil
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// execPipe runs the commands queued by fill in one pipeline and returns the
// first error, if any.
func (r *Redis) execPipe(ctx context.Context, fill func(redis.Pipeliner)) error {
	pipe := r.client.Pipeline()
	fill(pipe)
	if pipe.Len() == 0 {
		return nil
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}
