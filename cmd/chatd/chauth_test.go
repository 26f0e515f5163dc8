package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
)

// A ClickHouse that refuses the user or the password is no outage that
// waiting mends: the role stops at once and names the settings. It waited
// out the whole start wait (60 s), then said to check
// CHAT_CLICKHOUSE_ADDRS and that clickhouse-server runs, which it did.
func TestARefusedClickHouseLoginStopsTheStartAtOnce(t *testing.T) {
	ch := testserver.SharedClickHouse(t)
	r := testserver.NewRedis(t)
	for _, c := range []struct{ user, pass string }{{"nobody", ""}, {"default", "wrong"}} {
		env := map[string]string{"CHAT_KAFKA_BROKERS": "127.0.0.1:1", "CHAT_REDIS_ADDRS": r.Addr, "CHAT_CLICKHOUSE_ADDRS": ch.Addr,
			"CHAT_CLICKHOUSE_USER": c.user, "CHAT_CLICKHOUSE_PASSWORD": c.pass, "CHAT_HTTP_ADDR": freeAddr(t), "CHAT_LOG_LEVEL": "error"}
		done := make(chan error, 1)
		go func() {
			done <- runTo(context.Background(), []string{"persister"}, func(k string) string { return env[k] }, io.Discard)
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "CHAT_CLICKHOUSE_USER") || !strings.Contains(err.Error(), "CHAT_CLICKHOUSE_PASSWORD") {
				t.Errorf("user %q, password %q refused by ClickHouse: %v, want an error naming CHAT_CLICKHOUSE_USER and CHAT_CLICKHOUSE_PASSWORD", c.user, c.pass, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("user %q, password %q refused by ClickHouse: the persister still waits for ClickHouse after 15 s", c.user, c.pass)
		}
	}
}
