package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/topics"
)

// projectorGroups are the consumer groups `chatd projector` joins.
var projectorGroups = []string{consumers.GroupAckProjector, consumers.GroupMemberProjector,
	consumers.GroupReceiptProjector, consumers.GroupReceiptNotifier}

// role runs `chatd ROLE` on env until the test ends or it returns; the
// channel gets what it returned.
func role(t *testing.T, name string, env map[string]string) <-chan error {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done, exited := make(chan error, 1), make(chan struct{})
	go func() {
		done <- runTo(ctx, []string{name}, func(k string) string { return env[k] }, io.Discard)
		close(exited)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			t.Errorf("chatd %s did not stop within 20 s", name)
		}
	})
	return done
}

func roleEnv(t *testing.T, brokers, redisAddr string) map[string]string {
	return map[string]string{"CHAT_HTTP_ADDR": freeAddr(t), "CHAT_KAFKA_BROKERS": brokers, "CHAT_REDIS_ADDRS": redisAddr,
		"CHAT_PARTITIONS": "2", "CHAT_LOG_LEVEL": "error"}
}

// groupMembers counts the members of each group, as the broker knows them.
func groupMembers(t *testing.T, brokers string, groups []string) map[string]int {
	t.Helper()
	client, done := topics.NewClient([]string{brokers}, topics.Security{}, 10*time.Second)
	defer done()
	resp, err := client.DescribeGroups(context.Background(), &kafka.DescribeGroupsRequest{GroupIDs: groups})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, g := range resp.Groups {
		out[g.GroupID] = len(g.Members)
	}
	return out
}

func redisKeys(t *testing.T, addr string) []string {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	keys, err := rc.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// A projector started with CHAT_REDIS_ADDRS naming another Redis than the
// running deployment's (an empty one: a staging server, a typo) is
// refused at start, saying which Redis it found, which the deployment
// uses and how to go on; it sends the brokers no JoinGroup, so it takes
// no partition from the running projector, and writes to neither Redis.
// It joined the production groups and took partitions until stopped.
func TestARoleOnAnotherRedisIsRefusedAndJoinsNoGroup(t *testing.T) {
	b := testserver.NewBroker(t)
	prod, other := testserver.NewRedis(t), testserver.NewRedis(t)
	env := roleEnv(t, b.Addr(), prod.Addr)
	role(t, "projector", env)
	waitHealthy(t, "http://"+env["CHAT_HTTP_ADDR"]+"/readyz")
	before := groupMembers(t, b.Addr(), projectorGroups)
	prodKeys := redisKeys(t, prod.Addr)
	joins := testserver.CountRequests(b, kmsg.JoinGroup, nil)

	rogue := role(t, "projector", roleEnv(t, b.Addr(), other.Addr))
	var err error
	select {
	case err = <-rogue:
	case <-time.After(20 * time.Second):
		t.Fatalf("a projector on another Redis still runs after 20 s: %d JoinGroup requests since it started, groups' members %v (before it: %v), its Redis holds %d keys",
			joins.Load(), groupMembers(t, b.Addr(), projectorGroups), before, len(redisKeys(t, other.Addr)))
	}
	for _, want := range []string{"projector refused to start", other.Addr, prod.Addr, "CHAT_REDIS_ADDRS", "chatctl redis adopt"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("a projector on another Redis ended with %v; want a refusal naming %q", err, want)
		}
	}
	if n := joins.Load(); n != 0 {
		t.Fatalf("the refused projector sent %d JoinGroup requests", n)
	}
	if after := groupMembers(t, b.Addr(), projectorGroups); !mapsEqual(after, before) {
		t.Fatalf("the groups' members went from %v to %v", before, after)
	}
	for g, n := range before {
		if n != 1 {
			t.Fatalf("group %s has %d members, want the running projector alone", g, n)
		}
	}
	if keys := redisKeys(t, other.Addr); len(keys) != 0 {
		t.Fatalf("the refused projector wrote to its Redis: %q", keys)
	}
	if keys := redisKeys(t, prod.Addr); !slices.Equal(keys, prodKeys) {
		t.Fatalf("the deployment's Redis went from %q to %q", prodKeys, keys)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The deployment's Redis restarted with its data, and the same Redis after
// it lost everything (a flush, a restart without persistence) with every
// role stopped, are taken at start: the roles become ready, the second
// time after replaying the topics into it, as before the check.
func TestRolesStartOnTheirRedisAfterARestartAndAfterALoss(t *testing.T) {
	b := testserver.NewBroker(t)
	r := testserver.NewRedis(t)
	start := func(what string) {
		t.Helper()
		env := roleEnv(t, b.Addr(), r.Addr)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- runTo(ctx, []string{"projector"}, func(k string) string { return env[k] }, io.Discard) }()
		waitHealthy(t, "http://"+env["CHAT_HTTP_ADDR"]+"/readyz")
		stop()
		if err := <-done; err != nil {
			t.Fatalf("a projector %s: %v", what, err)
		}
	}
	start("on a fresh deployment")
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()
	ctx := context.Background()
	id, _ := rc.Get(ctx, "chat:deployment").Result()
	if id == "" {
		t.Fatal("a fresh deployment's Redis holds no id after its first role")
	}
	if err := rc.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	start("after its Redis restarted with its data")
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	start("after its Redis lost its data")
	if got, _ := rc.Get(ctx, "chat:deployment").Result(); got != id {
		t.Fatalf("the Redis that lost its data holds id %q after a role started on it, want %q back", got, id)
	}
	if n, _ := rc.Exists(ctx, "chat:offsets:"+consumers.GroupMemberProjector).Result(); n != 1 {
		t.Fatal("the member projector saved no position in the Redis that lost its data: it did not replay into it")
	}
}
