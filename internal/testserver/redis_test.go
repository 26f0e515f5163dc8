package testserver

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A restart keeps only what the last SAVE wrote, and comes back with a new
// run_id: the consumers' tests of a Redis restarted from an older snapshot
// rest on both.
func TestRedisRestartLoadsTheLastSaveUnderANewRunID(t *testing.T) {
	r := NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	ctx := context.Background()
	runID := func() string {
		t.Helper()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if id, ok := strings.CutPrefix(line, "run_id:"); ok {
				return id
			}
		}
		t.Fatalf("no run_id in INFO server:\n%s", info)
		return ""
	}
	before := runID()
	if err := c.Set(ctx, "saved", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "after", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, "saved", "after").Result(); err != nil || n != 1 {
		t.Fatalf("after the restart %d of the keys exist (err %v), want 1: the saved one", n, err)
	}
	if v := c.Get(ctx, "saved").Val(); v != "1" {
		t.Fatalf("saved = %q after the restart, want 1", v)
	}
	if after := runID(); after == before {
		t.Fatalf("run_id %s unchanged by a restart", after)
	}
}
