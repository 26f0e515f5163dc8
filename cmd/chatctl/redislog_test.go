package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/groupchat/chatd/internal/testserver"
)

// A Redis that could not be reached was told three times by go-redis's
// own log ("redis: 2024/05/01 12:00:00 pool.go:770: redis: connection
// pool: failed to dial after 5 attempts: ...") above chatctl's error,
// which names the setting to check. Only the latter is printed.
func TestAnUnreachableRedisIsToldOnceWithWhatToCheck(t *testing.T) {
	b := testserver.NewBroker(t)
	bin := filepath.Join(t.TempDir(), "chatctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build chatctl: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "rebuild", "acks", "-force")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CHAT_KAFKA_BROKERS=" + b.Addr(), "CHAT_REDIS_ADDRS=127.0.0.1:1"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("rebuild against a Redis that is not there succeeded")
	}
	if strings.Contains(stderr.String(), "pool.go") || !strings.HasPrefix(stderr.String(), "chatctl: Redis at 127.0.0.1:1") ||
		!strings.Contains(stderr.String(), "check CHAT_REDIS_ADDRS") {
		t.Errorf("chatctl rebuild with CHAT_REDIS_ADDRS=127.0.0.1:1 printed:\n%s\nwant chatctl's error alone, naming CHAT_REDIS_ADDRS", stderr.String())
	}
}
