package deployment

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/store"
)

// Watcher checks the deployment's id again after the role's Redis client
// dialled a new connection: a Redis restarted without its data is given
// the id back (it is the server the role checked, at the same address),
// and one that holds another id (a failover to another deployment's
// server, an address that now leads elsewhere) stops the role. Between
// dials it costs nothing.
type Watcher struct {
	Redis *store.Redis // required
	ID    string       // what Check returned
	Addrs []string
	Log   *slog.Logger // default slog.Default()

	dialed atomic.Bool
}

// Watch has rc, the client of w.Redis, tell w of the connections it
// dials. A Redis Cluster's connections are dialled by the client of each
// node, which a hook of the cluster's client does not reach.
func (w *Watcher) Watch(rc redis.UniversalClient) {
	h := dialHook{w}
	cc, ok := rc.(*redis.ClusterClient)
	if !ok {
		rc.AddHook(h)
		return
	}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	// The nodes known already: a node hooked twice only tells w twice.
	cc.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
		n.AddHook(h)
		return nil
	})
}

type dialHook struct{ w *Watcher }

func (h dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			h.w.dialed.Store(true)
		}
		return c, err
	}
}

func (dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Run checks after each dial, at most once a second, until ctx ends
// (nil) or the Redis turns out another deployment's (an error wrapping
// ErrNotTheDeploymentsRedis).
func (w *Watcher) Run(ctx context.Context) error {
	log := w.Log
	if log == nil {
		log = slog.Default()
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if !w.dialed.Swap(false) {
			continue
		}
		held, err := w.Redis.Deployment(ctx)
		if err == nil && held == "" {
			log.Warn("Redis holds no deployment id after a reconnect: it lost its data; giving it its id back, and the consumers rebuild it from the topics",
				"redis", addrList(w.Addrs), "id", w.ID)
			held, err = w.Redis.ClaimDeployment(ctx, w.ID)
		}
		if err != nil {
			w.dialed.Store(true) // Redis is down again: check after it is back
			continue
		}
		if held != w.ID {
			return fmt.Errorf("%w: the Redis at %s now holds deployment id %s, not %s as when this role started (a failover or an address that leads to another server); "+
				"stopping, so as to take no partition and write nothing there. Point CHAT_REDIS_ADDRS at the deployment's Redis",
				ErrNotTheDeploymentsRedis, addrList(w.Addrs), held, w.ID)
		}
	}
}
