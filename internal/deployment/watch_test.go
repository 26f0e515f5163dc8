package deployment

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/store"
)

// A role's Redis restarted without its data under it gets its id back
// once the role reconnects; one that comes back as another deployment's
// stops the role.
func TestTheWatcherRestoresTheIdAndStopsOnAnother(t *testing.T) {
	ctx := context.Background()
	k, s := kafkaOf(t), realRedis(t)
	id, err := Check(ctx, s.cfg(k))
	if err != nil {
		t.Fatal(err)
	}
	w := &Watcher{Redis: s.r, ID: id, Addrs: []string{s.addr}, Log: quiet}
	w.Watch(s.rc)
	done := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { done <- w.Run(wctx) }()

	// A loss of data: the connections drop, and the client dials again.
	s.rc.FlushAll(ctx)
	s.rc.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "no")
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.rc.Ping(ctx) // dials again
		if held, _ := s.r.Deployment(ctx); held == id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Redis that lost its data did not get its id back within 5 s of the reconnect")
		}
		time.Sleep(50 * time.Millisecond)
	}

	s.rc.Set(ctx, "chat:deployment", "0ther", 0)
	s.rc.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "no")
	s.rc.Ping(ctx)
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotTheDeploymentsRedis) {
			t.Fatalf("the watcher on a Redis of another id: %v, want ErrNotTheDeploymentsRedis", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher went on for 5 s on a Redis of another deployment's id")
	}
}

// On a Redis Cluster the connections are dialled by the client of each
// node, not by the cluster's: a node that lost its data gets its id back
// as a single Redis does.
func TestTheWatcherOfAClusterRestoresTheId(t *testing.T) {
	ctx := context.Background()
	k, addr := kafkaOf(t), testserver.NewRedisCluster(t).Addr
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	t.Cleanup(func() { cc.Close() })
	r, err := store.NewRedis(cc, store.RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Redis: r, Kafka: k, Addrs: []string{addr}, RecordWait: 300 * time.Millisecond, Log: quiet}
	id, err := Check(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &Watcher{Redis: r, ID: id, Addrs: []string{addr}, Log: quiet}
	w.Watch(cc)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(wctx)

	cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		n.FlushAll(ctx)
		return n.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "no").Err()
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		cc.Ping(ctx) // dials again
		if held, _ := r.Deployment(ctx); held == id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster that lost its data did not get its id back within 5 s of the reconnect")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
