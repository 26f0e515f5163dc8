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
// the frames of one batch (pushes and answers) leave in one system call
// (one per corkBufferMax of a larger batch). Frames written uncorked
// (pings, pongs, the close frame) go straight through. mu orders every
// write to the connection, so bytes never pass each other.
type cork struct {
	nc     net.Conn
	mu     sync.Mutex
	corked bool
	buf    *[]byte
	ctx    context.Context // hold's: bounds the writes of what gathered
}

// corkBufferMax is the most a cork gathers before it writes (a big
// backlog leaves in pieces, so the cork holds no second copy of it), and
// the largest buffer put back in the pool.
const corkBufferMax = 64 << 10

var corkPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func (w *cork) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.corked {
		return w.nc.Write(p)
	}
	*w.buf = append(*w.buf, p...)
	if len(*w.buf) >= corkBufferMax {
		err := w.send(w.ctx, *w.buf)
		*w.buf = (*w.buf)[:0]
		if err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// hold corks the connection; ctx bounds the writes until release.
func (w *cork) hold(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.corked {
		w.corked, w.buf, w.ctx = true, corkPool.Get().(*[]byte), ctx
	}
}

// send writes b; when ctx ends first, the connection is closed under the
// write.
func (w *cork) send(ctx context.Context, b []byte) error {
	stop := context.AfterFunc(ctx, func() { w.nc.Close() })
	_, err := w.nc.Write(b)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	return err
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
	w.corked, w.buf, w.ctx = false, nil, nil
	var err error
	if len(*buf) > 0 {
		err = w.send(ctx, *buf)
	}
	if cap(*buf) <= corkBufferMax {
		*buf = (*buf)[:0]
		corkPool.Put(buf)
	}
	return err
}
