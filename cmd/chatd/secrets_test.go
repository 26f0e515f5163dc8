package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

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
