package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
)

// A Redis that refuses the password (none given, or a wrong one) is no
// outage that waiting mends: the role stops at once and names the
// setting. It waited out the whole start wait (60 s) and then said to
// check CHAT_REDIS_ADDRS and that redis-server runs, which it did.
func TestARefusedRedisPasswordStopsTheStartAtOnce(t *testing.T) {
	r := testserver.NewRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	if err := rc.ConfigSet(context.Background(), "requirepass", "right").Err(); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	for _, c := range []struct{ addr, pass string }{{r.Addr, ""}, {r.Addr, "wrong"}} {
		pass := c.pass
		env := map[string]string{"CHAT_KAFKA_BROKERS": "127.0.0.1:1", "CHAT_REDIS_ADDRS": c.addr, "CHAT_REDIS_PASSWORD": pass,
			"CHAT_HTTP_ADDR": freeAddr(t), "CHAT_LOG_LEVEL": "error"}
		done := make(chan error, 1)
		go func() {
			done <- runTo(context.Background(), []string{"fanout"}, func(k string) string { return env[k] }, io.Discard)
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "CHAT_REDIS_PASSWORD") {
				t.Errorf("CHAT_REDIS_PASSWORD=%q refused by Redis: %v, want an error naming CHAT_REDIS_PASSWORD", pass, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("CHAT_REDIS_PASSWORD=%q refused by Redis: the fanout still waits for Redis after 10 s", pass)
		}
	}
}
