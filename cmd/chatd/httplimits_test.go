package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/gateway"
)

// Anyone who reaches the HTTP port, without a token, can open connections
// and leave them hanging: idle between requests, or in a body they never
// finish. The server lets each go after its timeout, refuses headers past
// their limit, and a WebSocket, which outlives any request, is not cut by
// either timeout.
func TestTheHTTPServerLetsHangingConnectionsGo(t *testing.T) {
	addr := startGateway(t, map[string]string{"CHAT_HTTP_READ_TIMEOUT": "1s", "CHAT_HTTP_IDLE_TIMEOUT": "1s"})

	// ended fails the test unless the server closes c within d.
	ended := func(what string, c net.Conn, rd *bufio.Reader, d time.Duration) {
		t.Helper()
		start := time.Now()
		c.SetReadDeadline(start.Add(d))
		for {
			if _, err := rd.ReadByte(); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Errorf("%s: the server still holds the connection after %v", what, d)
				}
				return
			}
		}
	}
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	{ // idle after a request
		c, rd := dial()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		ended("a keep-alive connection left idle", c, rd, 5*time.Second)
	}
	{ // a body never finished, with no token: the server answers 401
		// once it has read past the body, to reuse the connection
		c, rd := dial()
		fmt.Fprintf(c, "POST /v1/groups/g/messages HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\n{\"cmid\":", addr)
		ended("a request body that never arrives", c, rd, 5*time.Second)
	}
	{ // headers past the limit
		c, rd := dial()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Pad: %s\r\n\r\n", addr, strings.Repeat("p", 100<<10))
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("100 KiB of headers: %v %v, want 431", resp, err)
		}
		resp.Body.Close()
	}
	{ // a WebSocket outlives both timeouts
		tok, err := gateway.IssueToken([]byte(testSecret), "alice", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws?token="+tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		if _, f, err := ws.Read(ctx); err != nil || !strings.Contains(string(f), `"authed"`) {
			t.Fatalf("authed: %s %v", f, err)
		}
		time.Sleep(2500 * time.Millisecond) // past the read and idle timeouts: time must pass
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"op":"who_read","id":"1","gid":"g","msgid":0}`)); err != nil {
			t.Fatalf("a WebSocket after the HTTP timeouts: %v", err)
		}
		if _, f, err := ws.Read(ctx); err != nil || !strings.Contains(string(f), `"id":"1"`) {
			t.Fatalf("a WebSocket after the HTTP timeouts: %s %v", f, err)
		}
	}
}
