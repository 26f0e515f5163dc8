package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/internal/deployment"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// A deployment that moves to a new Redis for good (its Redis lost and
// replaced, or moved on purpose) says so with `chatctl redis adopt`: roles
// on the new Redis then start, and roles left on the one before are
// refused. The adoption is refused while roles still consume (they run on
// the Redis before, and would go on writing there).
func TestRedisAdoptMovesTheDeploymentToANewRedis(t *testing.T) {
	ctx := context.Background()
	b := testserver.NewBroker(t)
	old, next := testserver.NewRedis(t), testserver.NewRedis(t)
	client, done := topics.NewClient([]string{b.Addr()}, topics.Security{}, 10*time.Second)
	defer done()
	check := func(addr string) error {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		defer rc.Close()
		r, err := store.NewRedis(rc, store.RedisConfig{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = deployment.Check(ctx, deployment.Config{Redis: r, Kafka: client, Addrs: []string{addr}, RecordWait: 200 * time.Millisecond})
		return err
	}
	if err := check(old.Addr); err != nil {
		t.Fatalf("the first role of the deployment: %v", err)
	}
	if err := topics.Ensure(ctx, topics.Config{Brokers: []string{b.Addr()}, Partitions: 1}, nil); err != nil {
		t.Fatal(err)
	}

	// A fan-out still running on the Redis before.
	rctx, stopReader := context.WithCancel(ctx)
	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, GroupID: consumers.GroupFanout, Topic: topics.Messages,
		Dialer: topics.Security{}.Dialer(), MaxWait: 100 * time.Millisecond})
	go reader.FetchMessage(rctx)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{consumers.GroupFanout}})
		if err == nil && len(resp.Groups) == 1 && len(resp.Groups[0].Members) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fan-out did not join its group within 20 s")
		}
	}
	vars := map[string]string{"CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": next.Addr}
	if _, err := ctlOn(t, vars, "redis", "adopt"); !errors.Is(err, ErrGroupActive) || !strings.Contains(err.Error(), consumers.GroupFanout) {
		t.Fatalf("redis adopt beside a running fan-out: %v, want refused naming %s", err, consumers.GroupFanout)
	}
	if err := check(next.Addr); !errors.Is(err, deployment.ErrNotTheDeploymentsRedis) {
		t.Fatalf("the new Redis after a refused adoption: %v, want still refused", err)
	}
	stopReader()
	reader.Close()

	out, err := ctlOn(t, vars, "redis", "adopt")
	if err != nil {
		t.Fatalf("redis adopt with every role stopped: %v\n%s", err, out)
	}
	if !strings.Contains(out, "was ") || !strings.Contains(out, old.Addr) || !strings.Contains(out, next.Addr) {
		t.Fatalf("redis adopt said %q; want the Redis before and the one now named", out)
	}
	if err := check(next.Addr); err != nil {
		t.Fatalf("a role on the adopted Redis: %v", err)
	}
	if err := check(old.Addr); !errors.Is(err, deployment.ErrNotTheDeploymentsRedis) {
		t.Fatalf("a role on the Redis used before the adoption: %v, want refused", err)
	}
}
