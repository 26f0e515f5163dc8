package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A client that never reads its answer held the request's goroutine until
// its socket failed: the server has no write timeout (it would cut a send
// waiting on a stalled broker). An answer now has WriteTimeout to be taken
// in; the connection is dropped after it. The deadline is the answer's
// only: the next request on a keep-alive connection is answered after it.
func TestAnAnswerNobodyReadsIsGivenUpAfterWriteTimeout(t *testing.T) {
	e := newEnv(t, envOpts{})
	g, err := New(Config{Redis: e.redis, Producer: e.prod, History: e.hist, Secret: []byte(testSecret),
		Node: "deadline", WriteTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln := &stallListener{Listener: newLocalListener(t)}
	srv := httptest.NewUnstartedServer(g.Handler())
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() { ln.closeAll(); srv.Close() })

	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	ask := func(c net.Conn) { fmt.Fprintf(c, "GET /v1/sync HTTP/1.1\r\nHost: gw\r\n\r\n") } // no token: 401

	// A client whose socket takes nothing in: the server's write blocks.
	ln.stall.Store(true)
	c, rd := dial()
	ask(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := rd.ReadByte(); err == nil {
		t.Fatal("a stalled connection got a byte of its answer")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server still writes its answer to a client that reads nothing after 10s")
	}

	// A keep-alive connection: a second request, after the first answer's
	// deadline passed, is answered (net/http clears the deadline after
	// each answer).
	ln.stall.Store(false)
	c, rd = dial()
	for i := range 2 {
		ask(c)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d on one connection: %v %v, want 401", i+1, resp, err)
		}
		resp.Body.Close()
		past := time.Now().Add(300 * time.Millisecond)
		waitFor(t, "the first answer's deadline to pass", 5*time.Second, func() bool { return time.Now().After(past) })
	}
}

func newLocalListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stallListener hands out connections whose writes block, while stall was
// set at their accept, as to a client that reads nothing once its socket's
// buffers are full: until the write deadline passes, for ever without one.
type stallListener struct {
	net.Listener
	stall atomic.Bool
	mu    sync.Mutex
	conns []*stallConn
}

func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &stallConn{Conn: c, stall: l.stall.Load(), changed: make(chan struct{}), closed: make(chan struct{})}
	l.mu.Lock()
	l.conns = append(l.conns, sc)
	l.mu.Unlock()
	return sc, nil
}

// closeAll closes every connection, so that a write stuck for ever (the
// fault under test) does not keep the server from closing.
func (l *stallListener) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

type stallConn struct {
	net.Conn
	stall     bool
	mu        sync.Mutex
	deadline  time.Time
	changed   chan struct{} // closed when the deadline changes
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *stallConn) SetWriteDeadline(d time.Time) error {
	c.mu.Lock()
	c.deadline = d
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(d)
}

func (c *stallConn) SetDeadline(d time.Time) error {
	if err := c.SetWriteDeadline(d); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(d)
}

func (c *stallConn) Write(b []byte) (int, error) {
	if !c.stall {
		return c.Conn.Write(b)
	}
	for {
		c.mu.Lock()
		d, changed := c.deadline, c.changed
		c.mu.Unlock()
		var expired <-chan time.Time
		if !d.IsZero() {
			tm := time.NewTimer(time.Until(d))
			expired = tm.C
			defer tm.Stop()
		}
		select {
		case <-expired:
			return 0, os.ErrDeadlineExceeded
		case <-changed:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
}

func (c *stallConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	err := c.Conn.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
