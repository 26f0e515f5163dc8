package gateway

import (
	"bytes"
	"context"
	"errors"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// serve reads the connection's frames until it closes, then cleans up.
//
// An idle connection's goroutine waits in serve, for the client's next
// bytes, in a shallow call that fits the smallest goroutine stack (2 KiB).
// The WebSocket's read is far deeper (its stack grows to 4 KiB, and a
// stack never shrinks below four times what its goroutine uses), so it
// runs on a goroutine of its own, one frame at a time, only once a frame
// is arriving. The WebSocket would answer pings and take pongs only from
// inside such a read, which then waits on for the next frame; so serve
// takes them itself when whole in the read buffer: a ping is answered
// with a pong through the outbound queue, a pong (or anything else the
// client sends) shows the client alive to the next ping.
func (c *conn) serve() {
	defer c.g.wg.Done()
	defer c.g.disconnect(c)
	for c.awaitFrame() == nil && c.readFrame() {
	}
	// Answers queued already (to sends taken before Shutdown closed the
	// connection: their messages are accepted) go out before the close
	// frame, unless the client is too slow to take them.
	c.close(websocket.StatusNormalClosure, "") // a no-op if asked before; c.code is set after it
	if c.code != CloseTooSlow {
		c.queue.flush()
	}
	c.end()
	c.queue.stop()
}

// WebSocket control frames a client sends: FIN set, masked, a payload of at
// most 125 bytes (RFC 6455, 5.5), so the header is 2 bytes and a mask key 4.
const (
	finPing = 0x89
	finPong = 0x8a
)

// awaitFrame waits until the client's next frame is one the WebSocket must
// read (anything but a ping or a pong), handling pings and pongs meanwhile.
func (c *conn) awaitFrame() error {
	for {
		h, err := c.br.Peek(2)
		if err != nil {
			return err
		}
		c.heard.Store(true)
		n := int(h[1] & 0x7f)
		if h[0] != finPing && h[0] != finPong || h[1]&0x80 == 0 || n > 125 {
			return nil // the WebSocket reads it (and refuses what is wrong with it)
		}
		f, err := c.br.Peek(6 + n)
		if err != nil {
			return err
		}
		// A ping counts as a frame against the frame rate (this goroutine
		// and handle's never run at once). Its pong is left out when the
		// client pings too often or its queue is full: a client reads
		// what is queued, and RFC 6455 lets a pong answer only the last
		// ping.
		if f[0] == finPing && c.frames.take(c.frameRate()) {
			pong := make([]byte, 2+n)
			pong[0], pong[1] = finPong, byte(n)
			for i := range n {
				pong[2+i] = f[6+i] ^ f[2+i%4]
			}
			c.queue.put(out{ctl: pong}, c.write)
		}
		c.br.Discard(6 + n)
	}
}

// readFrame reads and handles one frame on a goroutine of its own (see
// serve); it reports whether the connection still reads.
func (c *conn) readFrame() bool {
	done := make(chan bool)
	go func() { done <- c.readOne() }()
	return <-done
}

// readOne reads one message from the WebSocket and handles it; it reports
// whether the connection still reads.
func (c *conn) readOne() bool {
	// No ctx to end the read: closing the WebSocket does (c.close).
	// The reads, writes and pings of a connection take no context
	// derived from c.ctx: a child, even one long gone, leaves c.ctx
	// holding a map and a channel for as long as the connection lives.
	typ, data, err := c.ws.Read(context.Background())
	if err != nil {
		if s := websocket.CloseStatus(err); s == -1 && !c.closing() {
			c.g.log.Debug("connection read ended", "uid", c.uid, "err", err)
			if errors.Is(err, websocket.ErrMessageTooBig) || bytes.Contains([]byte(err.Error()), []byte("read limited")) {
				c.close(websocket.StatusMessageTooBig, "frame larger than the limit")
			}
		}
		return false
	}
	c.handling.Store(true)
	c.handle(typ, data)
	c.handling.Store(false)
	return true
}

// errBinary answers a binary frame.
var errBinary = protocol.Errorf(protocol.CodeBadFrame, "frames are JSON text, not binary")

// frameRate is the rate and burst of frames a connection may send. It is
// the connection's, not the user's as the send rate is: a user's tabs
// sync, pull and ack each on its own, so a bucket shared by them would
// refuse a user with many tabs in normal use (RELIABILITY.md).
func (c *conn) frameRate() (float64, int) { return c.g.cfg.frameRate() }

// errAuthed answers an auth frame on a connection that authenticated.
var errAuthed = protocol.Errorf(protocol.CodeInvalid, "already authenticated; open a new connection to change user")

// handle answers one frame. Every frame counts against the frame rate,
// whatever its type: a flood of binary frames is refused as one of text.
func (c *conn) handle(typ websocket.MessageType, data []byte) {
	// A text frame is decoded first, so that a refusal names the request
	// it refuses (frames are bounded by the read limit).
	var req protocol.Request
	var err error = errBinary
	if typ == websocket.MessageText {
		req, err = protocol.Decode(data, c.g.cfg.MaxBody)
	}
	if !c.frames.take(c.frameRate()) {
		c.reply(protocol.Errorf(protocol.CodeRateLimited, "too many frames; slow down and retry (a send with the same cmid)").Frame(req.ID))
		return
	}
	if err != nil && req.Op == protocol.OpAuth {
		// Its token's refusals (unauthenticated, bad_token) would say the
		// connection closes, which it does not.
		err = errAuthed
	}
	if err != nil {
		c.reply(asProtocol(err).Frame(req.ID))
		return
	}
	if req.Op == protocol.OpSend && !c.g.sends.take(c.uid, c.g.cfg.SendRate, c.g.cfg.SendBurst) {
		c.reply(protocol.Errorf(protocol.CodeRateLimited, "more than %.0f sends per second; retry later with the same cmid", c.g.cfg.SendRate).Frame(req.ID))
		return
	}
	var ans any
	var perr *protocol.Error
	if req.Op == protocol.OpSync {
		ans, perr = c.syncCovered(c.ctx, &req)
	} else {
		ans, perr = c.g.do(c.ctx, c.uid, &req)
	}
	if n := extraFrames(&req, ans); n > 0 {
		rate, burst := c.frameRate()
		c.frames.charge(n, rate, burst)
	}
	switch {
	case perr != nil:
		c.reply(perr.Frame(req.ID))
	case req.ID == "" && (req.Op == protocol.OpAck || req.Op == protocol.OpRead):
		// fire and forget: no answer unless it failed
	case req.ID == "" && req.Op == protocol.OpCursors && len(ans.(*protocol.OK).Refused) == 0:
		// likewise: answered only to name the entries refused
	default:
		c.reply(protocol.Marshal(ans))
	}
}
