package store

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func onlineNodes(t *testing.T, r *Redis, uids ...string) map[string][]string {
	t.Helper()
	got, err := r.OnlineNodes(context.Background(), uids)
	if err != nil {
		t.Fatalf("OnlineNodes: %v", err)
	}
	for _, nodes := range got {
		slices.Sort(nodes)
	}
	return got
}

func setOnline(t *testing.T, r *Redis, node string, ttl time.Duration, announce bool, uids ...string) {
	t.Helper()
	if err := r.SetOnline(context.Background(), node, uids, ttl, announce); err != nil {
		t.Fatalf("SetOnline(%s, %v): %v", node, uids, err)
	}
}

func testPresence(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	eq := func(a, b []string) bool { return slices.Equal(a, b) }

	setOnline(t, r, "n1", time.Minute, false, "u1", "u2")
	setOnline(t, r, "n2", time.Minute, false, "u2")
	want := map[string][]string{"u1": {"n1"}, "u2": {"n1", "n2"}}
	if got := onlineNodes(t, r, "u1", "u2", "u3", "u2"); !maps.EqualFunc(got, want, eq) {
		t.Errorf("OnlineNodes = %v, want %v", got, want)
	}
	if ttl, err := c.PTTL(ctx, presenceKey("u2")).Result(); err != nil || ttl < time.Minute || ttl > time.Minute+presenceGrace {
		t.Errorf("presence key TTL = %v, %v; want about a minute plus %v", ttl, err, presenceGrace)
	}

	// An entry that expired counts for nothing, and the next SetOnline of the
	// user removes it.
	setOnline(t, r, "n3", time.Millisecond, false, "u1")
	time.Sleep(5 * time.Millisecond)
	if got := onlineNodes(t, r, "u1"); !eq(got["u1"], []string{"n1"}) {
		t.Errorf("after n3 expired: %v, want u1 on n1", got)
	}
	setOnline(t, r, "n1", time.Minute, false, "u1")
	if all, err := c.ZRange(ctx, presenceKey("u1"), 0, -1).Result(); err != nil || !eq(all, []string{"n1"}) {
		t.Errorf("u1's entries after a refresh = %v, %v; want the expired one gone", all, err)
	}
	// A short refresh by one node does not shorten the key below another's entry.
	setOnline(t, r, "n2", time.Second, false, "u2")
	if ttl, _ := c.PTTL(ctx, presenceKey("u2")).Result(); ttl < time.Minute {
		t.Errorf("presence key TTL after a shorter entry = %v, want at least n1's minute", ttl)
	}

	if err := r.SetOffline(ctx, "n1", []string{"u1", "u2", "nobody"}); err != nil {
		t.Fatal(err)
	}
	want = map[string][]string{"u2": {"n2"}}
	if got := onlineNodes(t, r, "u1", "u2"); !maps.EqualFunc(got, want, eq) {
		t.Errorf("after SetOffline: %v, want %v", got, want)
	}
	if got := onlineNodes(t, r); len(got) != 0 {
		t.Errorf("OnlineNodes() = %v", got)
	}

	sctx, cancel := context.WithCancel(ctx)
	ann, err := r.SubscribePresence(sctx)
	if err != nil {
		t.Fatal(err)
	}
	setOnline(t, r, "n1", time.Minute, false, "quiet") // a refresh: not announced
	setOnline(t, r, "n1", time.Minute, true, "u4", "u5")
	for _, want := range []string{"u4", "u5"} {
		select {
		case got := <-ann:
			if got != want {
				t.Errorf("announced %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no announcement of %s", want)
		}
	}
	cancel()
	for range ann { // closes once ctx ended
	}

	for _, err := range []error{
		r.SetOnline(ctx, "n/1", []string{"u1"}, time.Minute, false),
		r.SetOnline(ctx, "n1", []string{"u{1}"}, time.Minute, false),
		r.SetOnline(ctx, "n1", []string{"u1"}, 0, false),
		r.SetOffline(ctx, "", []string{"u1"}),
	} {
		if err == nil {
			t.Error("invalid presence call succeeded")
		}
	}
	if err := r.SetOnline(ctx, "n1", []string{"u1"}, 0, false); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ttl 0: %v, want ErrInvalidConfig", err)
	}
}
