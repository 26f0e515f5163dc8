package web

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A client that asks for the page's files and never reads them held the
// request's goroutine until its socket failed: nothing bounded the write.
// An answer now has its write timeout to be taken in, after which the
// connection is dropped; a client that reads gets every answer on one
// keep-alive connection, past that time too.
func TestAFileNobodyReadsIsGivenUpAfterTheWriteTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ln := &smallListener{Listener: listen(t), closed: make(chan struct{})}
	srv := httptest.NewUnstartedServer(Handler(timeout))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	// Small socket buffers both ways: a few pipelined answers fill them,
	// and the server's write blocks until the client reads.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	go func() {
		for range 100 { // 100 x chat.js, 1.7 MB
			if _, err := fmt.Fprintf(c, "GET /chat.js HTTP/1.1\r\nHost: web\r\n\r\n"); err != nil {
				return
			}
		}
	}()
	select {
	case <-ln.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the server still writes to a client that has read nothing for 10 s")
	}

	// A client that reads: each answer is written within the timeout, and
	// the next request, after that time, is answered too.
	c, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rd := bufio.NewReader(c)
	for i := range 2 {
		fmt.Fprintf(c, "GET /app.js HTTP/1.1\r\nHost: web\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d on one connection: %v %v, want 200", i+1, resp, err)
		}
		resp.Body.Close()
		time.Sleep(2 * timeout) // past the first answer's deadline: time must pass
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// smallListener gives its connections small send buffers and closes
// closed when the first of them is closed by the server.
type smallListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func (l *smallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c.(*net.TCPConn).SetWriteBuffer(4 << 10)
	return &closeConn{Conn: c, l: l}, nil
}

type closeConn struct {
	net.Conn
	l *smallListener
}

func (c *closeConn) Close() error {
	c.l.once.Do(func() { close(c.l.closed) })
	return c.Conn.Close()
}
