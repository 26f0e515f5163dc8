package gateway

// The connection's writes: what the gateway queues for a client, and the
// writer that drains the queue into the cork, frames of a batch in one
// system call.

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// reply and push enqueue without blocking; a full queue cuts the client.
func (c *conn) reply(frame []byte) { c.enqueue(out{frame: frame}) }
func (c *conn) push(msgs [][]byte) { c.enqueue(out{msgs: msgs}) }

func (c *conn) enqueue(o out) {
	if !c.queue.put(o, c.write) {
		c.g.metrics.slowCut.Add(1)
		c.close(CloseTooSlow, fmt.Sprintf("too slow: over %d frames or %d KiB queued; reconnect and pull what you missed", c.queue.limit, c.queue.maxB>>10))
	}
}

// write writes queued items in order; the messages of consecutive push
// items share push frames, so a backlog costs few writes, and the frames go
// out together, corked.
func (c *conn) write(items []out) bool {
	// One deadline for what is written together: a client that takes
	// longer than WriteTimeout to take it in is too slow.
	c.cork.hold(time.Now().Add(c.g.cfg.WriteTimeout))
	ok := c.writeItems(items)
	if err := c.cork.release(); err != nil {
		if ok && !c.closing() {
			c.close(CloseTooSlow, "write timed out; reconnect and pull what you missed")
		}
		return false
	}
	return ok
}

func (c *conn) writeItems(items []out) bool {
	buf := framePool.Get().(*bytes.Buffer)
	defer framePool.Put(buf)
	var msgs [][]byte
	for _, o := range items {
		if o.msgs != nil {
			msgs = append(msgs, o.msgs...)
			continue
		}
		if !c.writePushes(buf, msgs) {
			return false
		}
		msgs = msgs[:0]
		if o.ctl != nil {
			if !c.wrote(c.cork.ctl(o.ctl)) {
				return false
			}
			continue
		}
		if !c.writeFrame(o.frame, 0) {
			return false
		}
	}
	return c.writePushes(buf, msgs)
}

// framePool holds the buffers push frames are rendered in.
var framePool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writePushes writes msgs as push frames of at most maxPushBatch messages
// and about maxPushBytes each.
func (c *conn) writePushes(buf *bytes.Buffer, msgs [][]byte) bool {
	for len(msgs) > 0 {
		buf.Reset()
		buf.WriteString(`{"op":"push","msgs":[`)
		n := 0
		for n < len(msgs) && n < maxPushBatch && buf.Len() < maxPushBytes {
			if n > 0 {
				buf.WriteByte(',')
			}
			buf.Write(msgs[n])
			n++
		}
		buf.WriteString("]}")
		if !c.writeFrame(buf.Bytes(), n) {
			return false
		}
		msgs = msgs[n:]
	}
	return true
}

// writeFrame writes frame, a text frame carrying msgs pushed messages.
func (c *conn) writeFrame(frame []byte, msgs int) bool {
	if !c.wrote(c.cork.text(frame)) {
		return false
	}
	c.g.metrics.pushes.Add(int64(msgs))
	c.g.cfg.Metrics.Delivered(frame, msgs, time.Now())
	return true
}

// wrote reports whether a frame was written (into the cork, or out of it
// when the cork was full); a write that failed cuts the client as too
// slow, unless the connection is ending anyway.
func (c *conn) wrote(err error) bool {
	if err == nil {
		return true
	}
	if err != errCorkClosed && !c.closing() {
		c.close(CloseTooSlow, "write timed out; reconnect and pull what you missed")
	}
	return false
}

// writeNow writes before the writer runs (during authentication).
func (c *conn) writeNow(frame []byte) {
	c.cork.hold(time.Now().Add(c.g.cfg.WriteTimeout))
	c.cork.text(frame)
	c.cork.release()
}

// ping queues a ping (see pingConns); a client that sent nothing since the
// ping before, not even its pong, is closed. A ping never cuts a client as
// too slow: only pushes and answers do. Nor is a client cut while one of
// its frames is being handled, however long that takes (a send while the
// broker stalls: up to 3 x 10 s): its pongs wait unread behind the frame,
// which counts as heard from it meanwhile.
func (c *conn) ping() {
	if !c.handling.Load() && !c.heard.Swap(false) {
		c.close(websocket.StatusPolicyViolation, "no pong within the ping interval")
		return
	}
	if !c.queue.put(out{ctl: pingFrame}, c.write) {
		// The queue is full, for the moment or for good (the client is
		// then cut when the next push finds it so): no ping this round,
		// and no pong owed for one.
		c.heard.Store(true)
	}
}

// pingFrame is a WebSocket ping with no payload, as a server sends it.
var pingFrame = []byte{finPing, 0}
