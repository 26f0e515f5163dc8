package consumers

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/store"
)

// A cached presence lookup is trusted for PresenceTTL from before it was
// read, not from its answer: a user who registered while it was under way
// is pushed to at most PresenceTTL after, which is how long a gateway's
// check of a first sync waits before it reads the log's ends.
func TestACachedPresenceLookupExpiresTTLAfterItWasAsked(t *testing.T) {
	const lookup = 200 * time.Millisecond
	srv := testserver.NewRedis(t)
	rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { rc.Close() })
	rc.AddHook(slowRedis{lookup}) // a Redis busy with other work
	r, err := store.NewRedis(rc, store.RedisConfig{WindowSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	c := &presenceCache{ttl: DefaultPresenceTTL}
	c.clear()
	before := time.Now()
	if _, err := c.lookup(context.Background(), r, []string{"bob"}); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	e, ok := c.entries["bob"]
	c.mu.Unlock()
	if !ok {
		t.Fatal("bob's lookup was not cached")
	}
	if late := e.expires.Sub(before.Add(DefaultPresenceTTL)); late > lookup/2 {
		t.Fatalf("bob's cached \"offline\" is trusted %v past PresenceTTL from before the lookup", late)
	}
}

// slowRedis makes every command and pipeline take d more.
type slowRedis struct{ d time.Duration }

func (s slowRedis) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s slowRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(s.d)
		return next(ctx, cmd)
	}
}

func (s slowRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(s.d)
		return next(ctx, cmds)
	}
}
