package main

import (
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A first SIGINT starts a graceful shutdown, which may take up to
// CHAT_SHUTDOWN_TIMEOUT; a second one stops chatd at once. The test holds
// the shutdown open with a WebSocket connection whose peer never answers
// the close (it completed the upgrade and stopped reading).
func TestASecondInterruptStopsAtOnce(t *testing.T) {
	bin := buildChatd(t)
	t.Run("interrupts at their default", func(t *testing.T) { secondInterrupt(t, bin) })
	// A shell's background job (`chatd dev &`) starts with SIGINT ignored,
	// and so does a test run started as one. chatd still takes the first
	// as a stop; it must take the second as it says it will.
	t.Run("interrupts ignored at the start", func(t *testing.T) {
		secondInterrupt(t, "/bin/sh", "-c", `trap '' INT; exec "$0" "$@"`, bin)
	})
}

// secondInterrupt runs `cmd args... dev` (chatd, or what execs it),
// interrupts it twice and wants it stopped at once by the second.
func secondInterrupt(t *testing.T, cmd string, args ...string) {
	addr := freeAddr(t)
	p := startChatd(t, cmd, []string{"CHAT_HTTP_ADDR=" + addr, "CHAT_KAFKA_LISTEN=" + freeAddr(t), "CHAT_DATA_DIR=" + t.TempDir(), "CHAT_SHUTDOWN_TIMEOUT=60s", "CHAT_LOG_LEVEL=error"}, append(args, "dev")...)
	waitHealthy(t, "http://"+addr+"/readyz")
	holdShutdownOpen(t, addr)

	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.done:
		t.Fatalf("chatd stopped at the first SIGINT (%v) although a connection was draining; the test needs it draining", err)
	case <-time.After(time.Second):
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("chatd after a second SIGINT: %v, want it stopped at once, as failed", err)
		}
		if !strings.Contains(p.log.String(), "send it again to stop at once") {
			t.Errorf("chatd did not say how to stop at once; its log:\n%s", p.log.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("chatd was still running 5 s after a second SIGINT")
	}
}

// holdShutdownOpen opens a WebSocket to chatd at addr that completes the
// upgrade and then never reads, so the gateway's drain waits for it.
func holdShutdownOpen(t *testing.T, addr string) {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	t.Cleanup(func() { resp.Body.Close() }) // held open, never read
}
