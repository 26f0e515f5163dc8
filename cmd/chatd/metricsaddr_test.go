package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/gateway"
)

// With CHAT_METRICS_ADDR set, /metrics is served there and no longer on
// the public address; the gateway's limits are settings that reach it
// (CHAT_MAX_AUTHENTICATING, whose refusals the metrics count, and
// CHAT_MAX_TOKEN_TTL).
func TestMetricsServedApartFromThePublicAddress(t *testing.T) {
	maddr := freeAddr(t)
	addr := startGateway(t, map[string]string{"CHAT_METRICS_ADDR": maddr, "CHAT_MAX_AUTHENTICATING": "1", "CHAT_MAX_TOKEN_TTL": "1h"})

	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if status, _ := get("http://" + addr + "/metrics"); status == http.StatusOK {
		t.Fatalf("the public address serves /metrics with CHAT_METRICS_ADDR set")
	}
	if status, body := get("http://" + maddr + "/metrics"); status != http.StatusOK || !strings.Contains(body, "chat_connections ") {
		t.Fatalf("/metrics on CHAT_METRICS_ADDR: %d, chat_connections in it: %v", status, strings.Contains(body, "chat_connections "))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	silent, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.CloseNow()
	if ws, resp, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		if ws != nil {
			ws.CloseNow()
		}
		t.Fatalf("a 2nd connection beside one authenticating (CHAT_MAX_AUTHENTICATING=1): %v %v, want 503", resp, err)
	}
	if _, body := get("http://" + maddr + "/metrics"); !strings.Contains(body, `chat_connections_refused_total{reason="authenticating"} 1`) {
		t.Fatalf("the refusal is not counted in /metrics")
	}

	tok, err := gateway.IssueToken([]byte(testSecret), "alice", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/sync", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a 2h token with CHAT_MAX_TOKEN_TTL=1h: %d, want 401", resp.StatusCode)
	}
}
