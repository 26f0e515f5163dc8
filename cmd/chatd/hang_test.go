package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/gateway"
	"github.com/groupchat/chatd/internal/testserver"
)

// A gateway told to stop while a send waits on a broker that does not
// answer (a hung or partitioned broker) must still exit within
// CHAT_SHUTDOWN_TIMEOUT: the orchestrator kills it a few seconds later.
func TestShutdownWithAHungBrokerKeepsTheDeadline(t *testing.T) {
	b := testserver.NewBroker(t)
	redis := testserver.NewRedis(t)
	secret := strings.Repeat("s", 32)
	env := func(addr string) map[string]string {
		return map[string]string{
			"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": redis.Addr, "CHAT_PARTITIONS": "1",
			"CHAT_JWT_SECRET": secret, "CHAT_ADMIN_TOKEN": "admin", "CHAT_LOG_LEVEL": "error", "CHAT_SHUTDOWN_TIMEOUT": "1s",
		}
	}
	pr := freeAddr(t)
	defer runRole(t, "projector", env(pr), io.Discard)()
	gw := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runTo(ctx, []string{"gateway"}, func(k string) string { return env(gw)[k] }, io.Discard)
	}()
	waitHealthy(t, "http://"+pr+"/readyz")
	waitHealthy(t, "http://"+gw+"/readyz")

	do := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+gw+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if code, out := do("POST", "/v1/admin/groups", "admin", `{"gid":"team","members":["alice","bob"]}`); code != 200 {
		t.Fatalf("create group: %d %s", code, out)
	}
	alice, _ := gateway.IssueToken([]byte(secret), "alice", time.Hour)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if code, out := do("GET", "/v1/sync", alice, ""); code == 200 && strings.Contains(out, `"team"`) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("membership never arrived: %d %s", code, out)
		}
	}
	// From now on the broker takes produce requests and never answers them.
	var produced atomic.Bool
	b.Cluster().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		produced.Store(true)
		return nil, nil, true
	})
	go do("POST", "/v1/groups/team/messages", alice, `{"cmid":"c-1","body":"hello"}`)
	// The send is in flight once its produce request reached the broker.
	waitFor(t, "the send's produce request at the broker", produced.Load)

	start := time.Now()
	cancel() // SIGTERM
	select {
	case err := <-done:
		took := time.Since(start)
		if took > 4*time.Second {
			t.Fatalf("with CHAT_SHUTDOWN_TIMEOUT=1s the gateway returned only after %v (%v)", took.Round(100*time.Millisecond), err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("with CHAT_SHUTDOWN_TIMEOUT=1s the gateway had not returned 60 s after SIGTERM")
	}
}
