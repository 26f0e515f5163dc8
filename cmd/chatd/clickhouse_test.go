package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
)

// syncLog is a log sink that tests read while chatd writes it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A role started while ClickHouse is down waits for it instead of exiting,
// and the fan-out, which never uses ClickHouse, starts without it.
func TestRolesStartWhileClickHouseIsDown(t *testing.T) {
	b, err := broker.Start(broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	redis := testserver.NewRedis(t)
	ch := testserver.NewClickHouse(t)
	if err := ch.Stop(); err != nil {
		t.Fatal(err)
	}
	env := func(addr string) map[string]string {
		return map[string]string{
			"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": redis.Addr,
			"CHAT_CLICKHOUSE_ADDRS": ch.Addr, "CHAT_PARTITIONS": "2",
			"CHAT_JWT_SECRET": strings.Repeat("s", 32), "CHAT_ADMIN_TOKEN": "admin",
		}
	}
	start := func(role string) (addr string, logs *syncLog, stop func()) {
		addr, logs = freeAddr(t), &syncLog{}
		e := env(addr)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- runTo(ctx, []string{role}, func(k string) string { return e[k] }, logs)
		}()
		return addr, logs, func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("chatd %s: %v\n%s", role, err, logs)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("chatd %s did not stop within 20 s", role)
			}
		}
	}

	fanAddr, _, stopFanout := start("fanout")
	defer stopFanout()
	waitHealthy(t, "http://"+fanAddr+"/healthz")

	gwAddr, gwLog, stopGateway := start("gateway")
	defer stopGateway()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(gwLog.String(), "ClickHouse is not ready; waiting for it") {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not say it waits for ClickHouse:\n%s", gwLog)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := ch.Start(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, "http://"+gwAddr+"/healthz")
}
