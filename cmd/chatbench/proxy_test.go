package main

import (
	"io"
	"strings"
	"testing"
)

// chatbench joins -url and its paths (base+"/healthz", base+"/v1/ws"), so
// a gateway a proxy serves under a path prefix is benchmarked with -url
// https://proxy/chat (a trailing slash is dropped). A path of chatd's own
// (/v1/ws, /healthz...) is the mistake refused: chatbench waited minutes
// for /v1/ws/healthz to answer.
func TestAURLWithAProxyPathPrefixIsTaken(t *testing.T) {
	getenv := func(string) string { return "" }
	if _, err := parseConfig([]string{"-url", "https://proxy.example.com/chat/", "-admin-token", "x"}, getenv, io.Discard); err != nil {
		t.Fatalf("-url https://proxy.example.com/chat: %v; want it taken", err)
	}
	for _, u := range []string{"http://127.0.0.1:8080/v1", "https://proxy.example.com/chat/v1/ws", "http://127.0.0.1:8080/healthz"} {
		_, err := parseConfig([]string{"-url", u, "-admin-token", "x"}, getenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "without chatd's paths") {
			t.Errorf("-url %s: %v; want it refused, saying what to drop", u, err)
		}
	}
}
