package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// What a first bot meets: a config of defaults that Validate refused
// ("AckEvery 0: want at least 1") though Dial takes it; a URL of another
// path answered with the library's bare "expected handshake response
// status code 101 but got 404"; a body that is not UTF-8, accepted and
// stored with U+FFFD in place of its bytes; MarkRead of a group the client
// does not know said only "beyond the messages received"; and no way to
// tell the bot's own messages but its uid written into it again.
func TestWhatAFirstBotMeetsSaysWhatToDo(t *testing.T) {
	token := func(context.Context) (string, error) { return "alice", nil }
	if err := (&Config{URL: "ws://localhost:8080/v1/ws", Token: token}).Validate(); err != nil {
		t.Errorf("Validate of a config of defaults: %v; want nil, as Dial takes it", err)
	}

	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Dial(ctx, Config{URL: "ws" + strings.TrimPrefix(notFound.URL, "http") + "/ws", Token: token})
	if err == nil || !strings.Contains(err.Error(), "/v1/ws") {
		t.Errorf("Dial of a path the server does not upgrade: %v; want the error to name the endpoint /v1/ws", err)
	}

	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, _ := dial(t, p, "alice", nil)
	if got := c.UID(); got != "alice" {
		t.Errorf("UID() = %q, want alice, as the server authenticated the token", got)
	}
	if _, err := c.Send(ctx, "g1", "bad \xff\xfe"); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("Send of a body that is not UTF-8: %v; want a refusal saying so", err)
	}
	if msgs := p.msgs("g1"); len(msgs) != 0 {
		t.Errorf("the server stored %q", msgs[0].Body)
	}
	err = c.MarkRead(ctx, "nowhere", 3)
	if !errors.Is(err, ErrNotReceived) || !strings.Contains(err.Error(), "member") {
		t.Errorf("MarkRead of a group the client does not know: %v; want ErrNotReceived asking whether the user is a member", err)
	}
}

// A Send that waited for a connection the client could not make again
// (the server gone, or refusing the token) said only "context deadline
// exceeded". It says why the client is not connected.
func TestASendThatWaitedForAConnectionSaysWhyThereIsNone(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, _ := dial(t, p, "alice", func(c *Config) { c.OnError = nil })
	p.close() // the server goes away: every reconnect is refused
	waitFor(t, "a reconnect refused", func() bool { return c.lastConnectError() != nil })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Send(ctx, "g1", "hello")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last attempt") || !strings.Contains(err.Error(), "dial") {
		t.Fatalf("Send while the client cannot connect: %v; want the deadline and the last attempt's error", err)
	}
}

// The mistakes of a Config, and calls after Close, said what was wrong in
// Go's words or not which field: a URL without its scheme was
// `parse "127.0.0.1:8080/v1/ws": first path segment in URL cannot contain
// colon`, or `URL scheme "localhost": want ws or wss`; a negative
// duration "durations must not be negative" (one of four); a call after
// Close "client: closed"; a MarkRead past what came "beyond the messages
// received (up to -1)". Each says what to do.
func TestConfigMistakesAndCallsAfterCloseSayWhatToDo(t *testing.T) {
	token := func(context.Context) (string, error) { return "alice", nil }
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Token: token}, "client: config: URL is required: the gateway's WebSocket endpoint, e.g. ws://localhost:8080/v1/ws"},
		{Config{URL: "127.0.0.1:8080/v1/ws", Token: token}, `client: config: URL "127.0.0.1:8080/v1/ws" has no scheme: want ws://127.0.0.1:8080/v1/ws (wss:// over TLS)`},
		{Config{URL: "localhost:8080/v1/ws", Token: token}, `want ws://localhost:8080/v1/ws`},
		{Config{URL: "ws://h/v1/ws", Token: token, SendTimeout: -time.Second}, "client: config: SendTimeout -1s is negative: want 0 (its default) or more"},
		{Config{URL: "ws://h/v1/ws", Token: token, PingInterval: -1}, "PingInterval -1ns is negative"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate of %+v: %v; want %q", c.cfg, err, c.want)
		}
	}

	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, _ := dial(t, p, "alice", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.MarkRead(ctx, "g1", 5); !errors.Is(err, ErrNotReceived) || !strings.Contains(err.Error(), `the client has received none of g1's messages yet; mark read msgids OnMessage was handed, or Open(ctx, "g1") to pull them`) {
		t.Errorf("MarkRead of a group of which nothing came: %v; want ErrNotReceived saying what to mark read", err)
	}
	c.Close()
	_, err := c.Send(ctx, "g1", "hello")
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "Close was called on this Client; Dial a new one") {
		t.Errorf("Send after Close: %v; want ErrClosed saying to Dial a new Client", err)
	}
}

// A Dial of an address where nothing listens ended in the transport's
// words alone ("dial tcp 127.0.0.1:1: connect: connection refused"), and
// of one that answers nothing in "context deadline exceeded". They ask
// whether a gateway runs there, and name the settings.
func TestADialOfAnAddressWithoutAGatewaySaysWhatToCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = Dial(ctx, Config{URL: "ws://" + addr + "/v1/ws", Token: func(context.Context) (string, error) { return "t", nil }})
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "is a gateway running at that address, and is Config.URL its endpoint?") {
		t.Errorf("Dial of %s, where nothing listens: %v; want the refusal and what to check", addr, err)
	}
	// A listener that takes the connection and answers nothing: the
	// handshake ended in "context deadline exceeded" alone.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_, err = Dial(ctx, Config{URL: "ws://" + silent.Addr().String() + "/v1/ws", RequestTimeout: 300 * time.Millisecond, Token: func(context.Context) (string, error) { return "t", nil }})
	if err == nil || !strings.Contains(err.Error(), "no answer within Config.RequestTimeout (300ms); is a gateway serving at that address") {
		t.Errorf("Dial of %s, which answers nothing: %v; want the timeout named, with what to check", silent.Addr(), err)
	}
}
