package main

import (
	"context"
	"io"
	"maps"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
)

// runRole runs `chatd role` in this process with env as its settings and
// its log written to logw, and returns a stop that cancels it and checks
// that it returned cleanly.
func runRole(t *testing.T, role string, env map[string]string, logw io.Writer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runTo(ctx, []string{role}, func(k string) string { return env[k] }, logw) }()
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("chatd %s: %v", role, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("chatd %s did not stop within 20 s", role)
		}
	}
}

// testSecret is the token secret of the roles tests start.
var testSecret = strings.Repeat("s", 32)

// startGateway runs a gateway role on a broker and a Redis of its own, at
// a free address, with the settings of extra too, until the test ends,
// and returns its address once it is healthy.
func startGateway(t *testing.T, extra map[string]string) string {
	t.Helper()
	b := testserver.NewBroker(t)
	redis := testserver.NewRedis(t)
	addr := freeAddr(t)
	env := map[string]string{
		"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": redis.Addr, "CHAT_PARTITIONS": "2",
		"CHAT_JWT_SECRET": testSecret, "CHAT_LOG_LEVEL": "warn",
	}
	maps.Copy(env, extra)
	t.Cleanup(runRole(t, "gateway", env, os.Stderr))
	waitHealthy(t, "http://"+addr+"/healthz")
	return addr
}

// A production gateway serves the web page and the API, and none of the
// dev routes: no tokens for anyone, no group management without the admin
// token.
func TestGatewayRoleServesThePageButNoDevRoutes(t *testing.T) {
	addr := startGateway(t, map[string]string{"CHAT_ADMIN_TOKEN": "admin"})

	do := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(`{"uid":"mallory","gid":"g"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := do("GET", "/"); st != 200 || !strings.Contains(body, `src="app.js"`) {
		t.Errorf("GET /: %d, want the page", st)
	}
	if st, _ := do("GET", "/v1/sync"); st != 401 {
		t.Errorf("GET /v1/sync without a token: %d, want 401 (the API is there)", st)
	}
	for _, path := range []string{"/v1/dev/token", "/v1/dev/groups", "/v1/dev/groups/g/members"} {
		if st, body := do("POST", path); st != 404 {
			t.Errorf("POST %s on a production gateway: %d %s, want 404", path, st, body)
		}
	}
	if st, _ := do("POST", "/v1/admin/groups"); st != 403 {
		t.Errorf("POST /v1/admin/groups without the admin token: %d, want 403", st)
	}
}
