package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
)

// docker-compose.yml falls back to published placeholder secrets, so that
// it runs on a laptop as it is: its gateways listen on loopback only, and
// a gateway started with them says loudly that they must be replaced.
func TestTheComposePlaceholderSecretsAreLoopbackOnlyAndWarnedOf(t *testing.T) {
	compose, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	fallback := func(name string) string {
		m := regexp.MustCompile(`\$\{` + name + `:-([^}]+)\}`).FindSubmatch(compose)
		if m == nil {
			t.Fatalf("docker-compose.yml has no fallback for %s", name)
		}
		return string(m[1])
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*- "([^"]*:8080)"`).FindAllSubmatch(compose, -1) {
		if !strings.HasPrefix(string(m[1]), "127.0.0.1:") {
			t.Errorf("docker-compose.yml publishes a gateway on %s: with the placeholder secrets it must listen on 127.0.0.1 only", m[1])
		}
	}
	b := testserver.NewBroker(t)
	redis := testserver.NewRedis(t)
	addr := freeAddr(t)
	env := map[string]string{
		"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": redis.Addr, "CHAT_PARTITIONS": "2",
		"CHAT_JWT_SECRET": fallback("CHAT_JWT_SECRET"), "CHAT_ADMIN_TOKEN": fallback("CHAT_ADMIN_TOKEN"), "CHAT_LOG_LEVEL": "warn",
	}
	log := &testserver.Output{}
	defer runRole(t, "gateway", env, log)()
	waitHealthy(t, "http://"+addr+"/readyz")
	for _, name := range []string{"CHAT_JWT_SECRET", "CHAT_ADMIN_TOKEN"} {
		if !strings.Contains(log.String(), name+" is the placeholder docker-compose.yml publishes") {
			t.Errorf("no warning about %s in the gateway's log:\n%s", name, log)
		}
	}
}

// A gateway without ClickHouse beside a persister that trims the window
// into ClickHouse would answer every older pull `unavailable`: it refuses
// to start, and says what to set.
func TestAGatewayWithoutClickHouseBesideOneWithItIsRefused(t *testing.T) {
	b := testserver.NewBroker(t)
	redis := testserver.NewRedis(t)
	ch := testserver.SharedClickHouse(t)
	env := func(withCH bool) map[string]string {
		e := map[string]string{
			"CHAT_HTTP_ADDR": freeAddr(t), "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": redis.Addr, "CHAT_PARTITIONS": "1",
			"CHAT_JWT_SECRET": strings.Repeat("s", 32), "CHAT_LOG_LEVEL": "warn",
		}
		if withCH {
			e["CHAT_CLICKHOUSE_ADDRS"] = ch.Addr
			e["CHAT_CLICKHOUSE_DATABASE"] = fmt.Sprintf("hist%d", time.Now().UnixNano()%1e9)
		}
		return e
	}
	pe := env(true)
	defer runRole(t, "persister", pe, io.Discard)()
	waitHealthy(t, "http://"+pe["CHAT_HTTP_ADDR"]+"/readyz")
	ge := env(false)
	err := runTo(context.Background(), []string{"gateway"}, func(k string) string { return ge[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "set CHAT_CLICKHOUSE_ADDRS") {
		t.Fatalf("a gateway without ClickHouse beside a persister with it: %v, want a refusal saying what to set", err)
	}
}
