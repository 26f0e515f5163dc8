package testserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterReadyTimeout bounds the wait for a one-node cluster to serve.
const clusterReadyTimeout = 20 * time.Second

// NewRedisCluster starts a redis-server in cluster mode that holds every
// slot itself, a Redis Cluster of one node, and stops it when the test
// ends. Such a cluster refuses what a bigger one refuses: a command or
// script whose keys hash to different slots (CROSSSLOT). Its Addr is the
// seed of a go-redis ClusterClient.
func NewRedisCluster(t testing.TB) *Redis {
	t.Helper()
	r, err := startRedis(t.TempDir(), "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	if err != nil {
		t.Fatalf("%v\ninstall it with `make deps` (apt-get install redis-server)", err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("%v", err)
		}
	})
	if err := assignAllSlots(r.Addr); err != nil {
		t.Fatalf("testserver: make redis-server on %s a cluster: %v\n--- %s (tail):\n%s", r.Addr, err, r.logPath(), r.logTail(-1))
	}
	return r
}

// assignAllSlots gives the node at addr every slot and waits until the
// cluster says it is ok.
func assignAllSlots(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.Do(ctx, "cluster", "addslotsrange", 0, 16383).Err(); err != nil {
		return fmt.Errorf("CLUSTER ADDSLOTSRANGE: %w", err)
	}
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster_state not ok within %v (last: %v)", clusterReadyTimeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
