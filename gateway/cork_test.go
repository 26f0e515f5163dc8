package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestCorkGathersFramesUntilReleasedAndPassesTheWebSocketsStraightThrough(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ck := &cork{nc: a}
	got := make(chan []byte, 4)
	go func() {
		for {
			buf := make([]byte, 64)
			n, err := b.Read(buf)
			if err != nil {
				close(got)
				return
			}
			got <- buf[:n]
		}
	}()

	pong := []byte{finPong, 0}
	if _, err := ck.Write(pong); err != nil { // the WebSocket's, uncorked: straight through
		t.Fatal(err)
	}
	if w := <-got; !bytes.Equal(w, pong) {
		t.Fatalf("uncorked write arrived as %q", w)
	}
	if err := ck.text([]byte("early")); !errors.Is(err, errUncorked) {
		t.Fatalf("a frame written without holding the cork: %v, want %v", err, errUncorked)
	}
	ck.hold(time.Now().Add(10 * time.Second))
	if err := ck.text([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := ck.ctl(pingFrame); err != nil {
		t.Fatal(err)
	}
	if _, err := ck.Write(pong); err != nil { // the WebSocket's, corked: between two frames
		t.Fatal(err)
	}
	select {
	case w := <-got:
		t.Fatalf("%q went out while corked", w)
	case <-time.After(20 * time.Millisecond):
	}
	if err := ck.release(); err != nil {
		t.Fatal(err)
	}
	want := "\x81\x05hello" + string(pingFrame) + string(pong)
	if w := <-got; string(w) != want {
		t.Fatalf("released as %q, want one write of %q", w, want)
	}
	if err := ck.release(); err != nil { // not corked: nothing to do
		t.Fatal(err)
	}
}

// The WebSocket's close frame, written while a batch holds the cork, goes
// out after the frames gathered before it, and none follows it.
func TestCorkWritesNothingAfterTheCloseFrame(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	got := make(chan []byte)
	go func() { w, _ := io.ReadAll(b); got <- w }()
	ck := &cork{nc: a}
	ck.hold(time.Now().Add(10 * time.Second))
	if err := ck.text([]byte("before")); err != nil {
		t.Fatal(err)
	}
	closeFrame := []byte{finClose, 2, 0x03, 0xe8} // 1000, normal closure
	if _, err := ck.Write(closeFrame); err != nil {
		t.Fatal(err)
	}
	if err := ck.text([]byte("after")); !errors.Is(err, errCorkClosed) {
		t.Errorf("a text frame after the close frame: %v, want %v", err, errCorkClosed)
	}
	if err := ck.ctl(pingFrame); !errors.Is(err, errCorkClosed) {
		t.Errorf("a ping after the close frame: %v, want %v", err, errCorkClosed)
	}
	if err := ck.release(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if w, want := <-got, "\x81\x06before"+string(closeFrame); string(w) != want {
		t.Fatalf("the connection carried %q, want %q", w, want)
	}
}

// A client that does not read makes release fail once hold's deadline
// passes, with the connection closed, rather than block the writer.
func TestCorkReleaseGivesUpAtItsDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	ck := &cork{nc: a}
	start := time.Now()
	ck.hold(start.Add(50 * time.Millisecond))
	ck.text(bytes.Repeat([]byte("x"), 1000))
	if err := ck.release(); err == nil {
		t.Fatal("release to a peer that never reads succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("release took %v to give up", d)
	}
	if _, err := a.Write([]byte("y")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("the connection is still open after the timed-out release (write: %v)", err)
	}
}

// A batch larger than corkBufferMax leaves in pieces while corked: the cork
// holds at most corkBufferMax and the write in hand, not a second copy of
// a whole batch (up to QueueBytes) beside the queued items.
func TestCorkHoldsNoMoreThanItsBufferMax(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	got := make(chan int64)
	go func() { n, _ := io.Copy(io.Discard, b); got <- n }()
	ck := &cork{nc: a}
	ck.hold(time.Now().Add(10 * time.Second))
	piece := bytes.Repeat([]byte("x"), 4<<10)
	const pieces = 64 // 256 KiB
	for range pieces {
		if err := ck.text(piece); err != nil {
			t.Fatal(err)
		}
		ck.mu.Lock()
		n := len(*ck.buf)
		ck.mu.Unlock()
		if n > corkBufferMax+len(piece)+4 {
			t.Fatalf("the cork holds %d bytes, over its %d and the frame in hand", n, corkBufferMax)
		}
	}
	if err := ck.release(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if n := <-got; n != pieces*int64(4+len(piece)) {
		t.Fatalf("%d bytes arrived, want %d", n, pieces*(4+len(piece)))
	}
}

// The cork's frames are what a WebSocket client reads, at each of the
// three sizes of length (RFC 6455, 5.2), and none follows the WebSocket's
// close frame.
func TestCorkFramesReadByAWebSocketClient(t *testing.T) {
	sizes := []int{0, 125, 126, 65535, 65536, 300 << 10}
	after := make(chan error, 1)
	c, ctx := corkedServer(t, func(ws *websocket.Conn, ck *cork) {
		for _, n := range sizes {
			if err := ck.text([]byte(strings.Repeat("a", n))); err != nil {
				t.Error(err)
			}
		}
		ck.ctl(pingFrame)
		if err := ck.release(); err != nil {
			t.Error(err)
		}
		ws.Close(websocket.StatusNormalClosure, "bye")
		ck.hold(time.Now().Add(10 * time.Second))
		after <- ck.text([]byte("too late"))
		ck.release()
	})
	c.SetReadLimit(1 << 20)
	for _, n := range sizes {
		typ, p, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading the frame of %d bytes: %v", n, err)
		}
		if typ != websocket.MessageText || len(p) != n || strings.Trim(string(p), "a") != "" {
			t.Fatalf("read %v of %d bytes, want text of %d", typ, len(p), n)
		}
	}
	_, _, err := c.Read(ctx) // answers the ping, then reads the close
	if s := websocket.CloseStatus(err); s != websocket.StatusNormalClosure {
		t.Fatalf("after the frames: %v, want the close frame", err)
	}
	if err := <-after; !errors.Is(err, errCorkClosed) {
		t.Fatalf("a frame after the close frame: %v, want %v", err, errCorkClosed)
	}
}

// A client's close that comes while a batch holds the cork is answered:
// the WebSocket closes the connection as soon as it has written its close
// frame, so the frame (and what gathered before it) cannot wait for the
// batch's end.
func TestCorkAnswersAClientsCloseWhileABatchHoldsIt(t *testing.T) {
	ready := make(chan struct{})
	released := make(chan error, 1)
	c, _ := corkedServer(t, func(ws *websocket.Conn, ck *cork) { // a batch under way
		ck.text([]byte("pushed"))
		close(ready)
		_, _, err := ws.Read(context.Background()) // takes the client's close and answers it
		if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
			t.Errorf("server read: %v, want the client's close", err)
		}
		released <- ck.release() // the batch ends
	})
	<-ready
	if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Errorf("the client's close was not answered: %v", err)
	}
	if err := <-released; err != nil {
		t.Errorf("release after the close handshake: %v", err)
	}
}

// corkedServer serves one WebSocket whose frames go through a cork, held
// for a batch when serve begins, and returns a client connected to it.
func corkedServer(t *testing.T, serve func(ws *websocket.Conn, ck *cork)) (*websocket.Conn, context.Context) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sb := &smallBuffers{ResponseWriter: w}
		ws, err := websocket.Accept(sb, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		sb.cork.hold(time.Now().Add(10 * time.Second))
		serve(ws, sb.cork)
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, ctx
}
