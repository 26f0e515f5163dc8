package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
)

// A client that asks and never reads its answers held the request's
// goroutine until its socket failed: the health checks, /metrics (on the
// HTTP address or its own) and the web page had no write deadline, only
// the API's answers had. Each now has CHAT_HTTP_WRITE_TIMEOUT to be taken
// in, after which the connection is dropped; a client that reads gets its
// answers on one keep-alive connection, past that time too.
func TestAnswersNobodyReadsAreGivenUpAfterTheWriteTimeout(t *testing.T) {
	b := testserver.NewBroker(t)
	redis := testserver.NewRedis(t)
	gw, maddr, proj := freeAddr(t), freeAddr(t), freeAddr(t)
	env := func(addr string) map[string]string {
		return map[string]string{
			"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": redis.Addr, "CHAT_PARTITIONS": "2",
			"CHAT_JWT_SECRET": strings.Repeat("s", 32), "CHAT_LOG_LEVEL": "warn", "CHAT_HTTP_WRITE_TIMEOUT": "1s",
		}
	}
	genv := env(gw)
	genv["CHAT_METRICS_ADDR"] = maddr
	defer runRole(t, "gateway", genv, os.Stderr)()
	defer runRole(t, "projector", env(proj), os.Stderr)() // /metrics on its HTTP address
	waitHealthy(t, "http://"+gw+"/healthz")
	waitHealthy(t, "http://"+proj+"/healthz")

	// Each client asks again and again and reads nothing, with a small
	// receive buffer: the server's writes block once the sockets' buffers
	// are full, it stops reading the requests, and the client's write
	// blocks too. Once that has lasted well past the write timeout, the
	// client reads: a server that let it go has closed the connection,
	// and what it had sent (its socket's buffers) ends in EOF or a reset;
	// one that held it goes on answering the requests it holds, for far
	// longer than 10 s (its receive buffer grows to megabytes of them).
	var wg sync.WaitGroup
	for _, c := range []struct{ addr, path string }{
		{gw, "/healthz"}, {gw, "/readyz"}, {gw, "/"}, {gw, "/app.js"}, {maddr, "/metrics"}, {maddr, "/nothing"}, {proj, "/metrics"}, {proj, "/nothing"},
	} {
		wg.Go(func() {
			conn, err := net.Dial("tcp", c.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			conn.(*net.TCPConn).SetReadBuffer(4 << 10)
			req := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: chatd\r\n\r\n", c.path))
			for end := time.Now().Add(2 * time.Minute); ; {
				if time.Now().After(end) {
					t.Errorf("GET %s on %s: the server still reads the requests of a client that reads nothing after 2 minutes", c.path, c.addr)
					return
				}
				conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
				if _, err := conn.Write(req); err != nil {
					break // blocked for 3 s, or the connection was reset
				}
			}
			buf := make([]byte, 64<<10)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			for {
				if _, err := conn.Read(buf); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						t.Errorf("GET %s on %s: the server held a client that read nothing for 3 s (the write timeout is 1 s): it still answers 10 s later", c.path, c.addr)
					}
					return
				}
			}
		})
	}
	wg.Wait()

	// A client that reads: the deadline is each answer's own.
	conn, err := net.Dial("tcp", gw)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	for i := range 2 {
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: chatd\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz %d on one connection: %v %v, want 200", i+1, resp, err)
		}
		resp.Body.Close()
		time.Sleep(1500 * time.Millisecond) // past the first answer's deadline: time must pass
	}
}
