package main

import (
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
)

// A role started while ClickHouse is down waits for it instead of exiting,
// and the fan-out, which never uses ClickHouse, starts without it.
func TestRolesStartWhileClickHouseIsDown(t *testing.T) {
	b := testserver.NewBroker(t)
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
	start := func(role string) (addr string, logs *testserver.Output, stop func()) {
		addr, logs = freeAddr(t), &testserver.Output{}
		return addr, logs, runRole(t, role, env(addr), logs)
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
