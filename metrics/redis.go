package metrics

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisHook times every command and pipeline of a go-redis client into
// chat_store_seconds{store="redis"}: op is the command's name, or
// "pipeline" for a pipeline. Install it with client.AddHook. A nil Set
// gives a hook that only passes calls on.
func (s *Set) RedisHook() redis.Hook { return redisHook{s} }

type redisHook struct{ s *Set }

func (h redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if h.s == nil {
		return next
	}
	return func(ctx context.Context, cmd redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmd)
		h.s.ObserveStore("redis", cmd.Name(), time.Since(start))
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if h.s == nil {
		return next
	}
	return func(ctx context.Context, cmds []redis.Cmder) error {
		start := time.Now()
		err := next(ctx, cmds)
		h.s.ObserveStore("redis", "pipeline", time.Since(start))
		return err
	}
}

var _ redis.Hook = redisHook{}
