package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// newClusterClient returns a cluster client on srv after FLUSHALL.
func newClusterClient(t testing.TB, srv *testserver.Redis) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { c.Close() })
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
		return n.FlushAll(ctx).Err()
	})
	if err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	return c
}

// The store works on a Redis Cluster, which refuses a command whose keys
// are in different slots.
func TestRedisCluster(t *testing.T) {
	srv := testserver.NewRedisCluster(t)
	runRedisSuite(t, func(t *testing.T) redis.UniversalClient {
		return newClusterClient(t, srv)
	})
}

// A rebuild's wipe deletes the keys of many groups, each in its own slot.
func TestWipeOnACluster(t *testing.T) {
	c := newClusterClient(t, testserver.NewRedisCluster(t))
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	var acks []schema.Ack
	for i := range 50 {
		acks = append(acks, schema.Ack{Gid: fmt.Sprint("g", i), Uid: "alice", Upto: 1})
	}
	advanceAcks(t, r, acks...)
	if err := r.SaveOffsets(ctx, "chat.ack-projector", "chat.acks", map[int]int64{0: 50}); err != nil {
		t.Fatal(err)
	}
	n, err := r.Wipe(ctx, ProjectionAcks, "chat.ack-projector")
	if err != nil || n != 51 {
		t.Fatalf("Wipe = %d, %v; want the 50 ack sets and the offsets deleted", n, err)
	}
	for _, a := range acks {
		if got := ackCursors(t, r, a.Gid); len(got) != 0 {
			t.Errorf("after Wipe, %s has cursors %v", a.Gid, got)
		}
	}
}
