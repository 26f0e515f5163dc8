package gateway

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"time"
)

// cork is what a connection's frames are written to. The connection's
// writer holds it corked while it writes a batch (pushes, answers, pings,
// pongs), and the frames gather in a buffer taken from a pool, to go out
// in one write when it is released.
//
// Buffers then live only while something is written, not for as long as
// the connection (the WebSocket's own write buffer is a few bytes), and
// the frames of one batch leave in one system call (one per
// corkBufferMax of a larger batch).
//
// The writer renders its frames itself (text and control frames, as a
// server sends them, unmasked): the WebSocket's Write would take two locks,
// each a select, and a timer for every frame. The WebSocket writes only
// control frames of its own (its close frame, and a pong to a ping between
// the pieces of a fragmented message), each in one Write (see
// writeBuffer), which go straight through when the cork is not held; its
// close frame goes out at once even when the cork is held. Once its close
// frame is written, the cork refuses every frame after it. mu
// orders every write to the connection, so bytes never pass each other.
type cork struct {
	nc       net.Conn
	mu       sync.Mutex
	corked   bool
	closed   bool // the WebSocket wrote its close frame: nothing may follow it
	buf      *[]byte
	deadline time.Time // hold's: bounds the writes of what gathered
}

// corkBufferMax is the most a cork gathers before it writes (a big
// backlog leaves in pieces, so the cork holds no second copy of it), and
// the largest buffer put back in the pool.
const corkBufferMax = 64 << 10

var corkPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// The first byte of a final frame, by opcode (RFC 6455, 5.2).
const (
	finText  = 0x81
	finClose = 0x88
)

// errCorkClosed is what a frame meets after the WebSocket's close frame.
var errCorkClosed = errors.New("gateway: the close frame is written")

// errUncorked is what a frame meets outside hold and release: a mistake
// in the gateway, not the client's.
var errUncorked = errors.New("gateway: a frame written without holding the cork")

// Write takes what the WebSocket writes: a whole control frame each time.
func (w *cork) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p) > 0 && p[0] == finClose {
		w.closed = true
	}
	if !w.corked {
		// The WebSocket bounds its own writes (it closes the connection
		// when they take too long); a deadline left by a batch would fail
		// them.
		w.nc.SetWriteDeadline(time.Time{})
		return w.nc.Write(p)
	}
	if err := w.gather(p); err != nil {
		return 0, err
	}
	if w.closed {
		// The WebSocket may close the connection as soon as its close
		// frame is written (it does when it answers the client's close):
		// the frame goes out now, after what gathered before it.
		if err := w.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// text writes p as one final text frame; the cork must be held.
func (w *cork) text(p []byte) error {
	var h [10]byte
	return w.frame(textHeader(h[:0], len(p)), p)
}

// ctl writes f, a whole control frame; the cork must be held.
func (w *cork) ctl(f []byte) error { return w.frame(f, nil) }

func (w *cork) frame(head, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return errCorkClosed
	case !w.corked:
		return errUncorked
	}
	*w.buf = append(*w.buf, head...)
	return w.gather(p)
}

// gather appends p to the buffer, writing the buffer once it reaches
// corkBufferMax.
func (w *cork) gather(p []byte) error {
	*w.buf = append(*w.buf, p...)
	if len(*w.buf) < corkBufferMax {
		return nil
	}
	return w.flush()
}

// flush writes what gathered, if anything.
func (w *cork) flush() error {
	if len(*w.buf) == 0 {
		return nil
	}
	err := w.send(*w.buf)
	*w.buf = (*w.buf)[:0]
	return err
}

// textHeader appends the header of a final text frame of n bytes, as a
// server sends it: no mask (RFC 6455, 5.2).
func textHeader(b []byte, n int) []byte {
	switch {
	case n < 126:
		return append(b, finText, byte(n))
	case n < 1<<16:
		return append(b, finText, 126, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, finText, 127), uint64(n))
	}
}

// hold corks the connection; what gathers must be written by deadline.
func (w *cork) hold(deadline time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.corked {
		w.corked, w.buf, w.deadline = true, corkPool.Get().(*[]byte), deadline
	}
}

// send writes b by hold's deadline. A write that fails closes the
// connection: it may have left a frame unfinished, after which nothing can
// be written, not even the close frame.
func (w *cork) send(b []byte) error {
	w.nc.SetWriteDeadline(w.deadline)
	_, err := w.nc.Write(b)
	if err != nil {
		closeNow(w.nc)
	}
	return err
}

// closeNow closes nc without a word: over TLS, the close_notify that
// tls.Conn.Close writes would wait up to 5 s more on a client that reads
// nothing, holding the writer that gave up on it.
func closeNow(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	nc.Close()
}

// release uncorks the connection, writing what gathered by hold's
// deadline (when the deadline passes first, the connection is closed).
func (w *cork) release() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.corked {
		return nil
	}
	buf, err := w.buf, w.flush()
	w.corked, w.buf = false, nil
	if cap(*buf) <= corkBufferMax {
		*buf = (*buf)[:0]
		corkPool.Put(buf)
	}
	return err
}
