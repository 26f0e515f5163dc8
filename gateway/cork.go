package gateway

import (
	"context"
	"net"
	"sync"
)

// cork is what the WebSocket writes its frames to: the connection itself,
// except while the connection's writer holds it corked, when the bytes
// gather in a buffer taken from a pool, to go out in one write when it is
// uncorked.
//
// Buffers then live only while something is written, not for as long as
// the connection (the WebSocket's own write buffer is a few bytes), and
// the frames of one batch (pushes and answers) leave in one system call.
// Frames written uncorked (pings, pongs, the close frame) go straight
// through. mu orders every write to the connection, so bytes never pass
// each other.
type cork struct {
	nc     net.Conn
	mu     sync.Mutex
	corked bool
	buf    *[]byte
}

// corkBufferMax is the largest buffer put back in the pool; a larger one
// (a big backlog written at once) is left to the garbage collector.
const corkBufferMax = 64 << 10

var corkPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func (w *cork) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.corked {
		*w.buf = append(*w.buf, p...)
		return len(p), nil
	}
	return w.nc.Write(p)
}

// hold corks the connection.
func (w *cork) hold() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.corked {
		w.corked, w.buf = true, corkPool.Get().(*[]byte)
	}
}

// release uncorks the connection, writing what gathered; ctx bounds the
// write (when it ends first, the connection is closed under the write).
func (w *cork) release(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.corked {
		return nil
	}
	buf := w.buf
	w.corked, w.buf = false, nil
	var err error
	if len(*buf) > 0 {
		stop := context.AfterFunc(ctx, func() { w.nc.Close() })
		_, err = w.nc.Write(*buf)
		if !stop() && err == nil {
			err = ctx.Err()
		}
	}
	if cap(*buf) <= corkBufferMax {
		*buf = (*buf)[:0]
		corkPool.Put(buf)
	}
	return err
}
