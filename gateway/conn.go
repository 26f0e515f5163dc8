package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/groupchat/chatd/protocol"
)

// Close codes beyond RFC 6455's, in the 4000-4999 range for applications.
const (
	CloseUnauthenticated websocket.StatusCode = 4001 // reason says what was wrong with the token
	CloseTooSlow         websocket.StatusCode = 4008 // the client did not read fast enough: reconnect, resync
)

// A push frame carries at most maxPushBatch queued messages and stops
// growing past maxPushBytes, so clients with modest read limits cope.
const (
	maxPushBatch = 256
	maxPushBytes = 256 << 10
)

// out is one queued outbound item: a whole frame, or the messages of one
// fan-out batch for this connection (protocol.Message JSON each), which the
// writer turns into push frames.
type out struct {
	frame []byte
	msgs  [][]byte
}

// errAnswered is authenticate's error when the client has been answered
// and the connection closed already.
var errAnswered = protocol.Errorf(protocol.CodeUnauthenticated, "answered")

type conn struct {
	g      *Gateway
	ws     *websocket.Conn
	uid    string
	queue  chan out
	sends  *rate.Limiter
	frames *rate.Limiter

	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	closed chan struct{} // closed when the close handshake is over
}

// serveWS accepts a WebSocket and runs it until it closes.
func (g *Gateway) serveWS(w http.ResponseWriter, r *http.Request) {
	if g.closing.Load() {
		http.Error(w, `{"code":"unavailable","message":"the gateway is shutting down; reconnect to another"}`, http.StatusServiceUnavailable)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: g.cfg.AllowedOrigins})
	if err != nil {
		g.log.Debug("websocket accept failed", "err", err)
		return // Accept has answered the client
	}
	ws.SetReadLimit(int64(g.cfg.MaxBody) + 4096)
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{g: g, ws: ws, queue: make(chan out, g.cfg.QueueSize), ctx: ctx, cancel: cancel, closed: make(chan struct{}),
		sends:  rate.NewLimiter(rate.Limit(g.cfg.SendRate), g.cfg.SendBurst),
		frames: rate.NewLimiter(rate.Limit(max(g.cfg.SendRate*4, 100)), g.cfg.SendBurst*4)}
	g.wg.Add(1)
	defer g.wg.Done()
	defer cancel()

	uid, perr := c.authenticate(r)
	if perr != nil {
		if perr != errAnswered {
			c.writeNow(perr.Frame(""))
			c.close(CloseUnauthenticated, string(perr.Code)+": "+perr.Message)
		}
		<-c.closed
		return
	}
	c.uid = uid
	g.connect(c)
	defer g.disconnect(c)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.writeLoop() }()
	go func() { defer wg.Done(); c.pingLoop() }()
	c.readLoop()
	c.close(websocket.StatusNormalClosure, "")
	<-c.closed
	wg.Wait()
}

// authenticate takes the token from the URL (?token=), the Authorization
// header, or a first auth frame sent within AuthTimeout.
func (c *conn) authenticate(r *http.Request) (string, *protocol.Error) {
	if tok := bearer(r); tok != "" {
		uid, perr := verify(c.g.cfg.Secret, tok)
		if perr == nil {
			c.writeNow(protocol.Marshal(protocol.Authed{Op: protocol.OpAuthed, Uid: uid}))
		}
		return uid, perr
	}
	// A read cut by a deadline closes the socket without a word, so the
	// timeout answers and closes with 4001 itself; the read then fails.
	timer := time.AfterFunc(c.g.cfg.AuthTimeout, func() {
		perr := protocol.Errorf(protocol.CodeUnauthenticated, "no auth frame within %v; send {\"op\":\"auth\",\"token\":...} first", c.g.cfg.AuthTimeout)
		c.writeNow(perr.Frame(""))
		c.close(CloseUnauthenticated, string(perr.Code)+": "+perr.Message)
	})
	typ, data, err := c.ws.Read(c.ctx)
	if !timer.Stop() {
		return "", errAnswered
	}
	if err != nil {
		return "", protocol.Errorf(protocol.CodeUnauthenticated, "the connection ended before an auth frame")
	}
	if typ != websocket.MessageText {
		return "", protocol.Errorf(protocol.CodeBadFrame, "frames are JSON text; the first must be auth")
	}
	req, err := protocol.Decode(data, c.g.cfg.MaxBody)
	if err != nil {
		return "", asProtocol(err)
	}
	if req.Op != protocol.OpAuth {
		return "", protocol.Errorf(protocol.CodeUnauthenticated, "the first frame must be auth, got %q", req.Op)
	}
	uid, perr := verify(c.g.cfg.Secret, req.Token)
	if perr == nil {
		c.writeNow(protocol.Marshal(protocol.Authed{Op: protocol.OpAuthed, ID: req.ID, Uid: uid}))
	}
	return uid, perr
}

func (c *conn) readLoop() {
	for {
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			if s := websocket.CloseStatus(err); s == -1 && c.ctx.Err() == nil {
				c.g.log.Debug("connection read ended", "uid", c.uid, "err", err)
				if errors.Is(err, websocket.ErrMessageTooBig) || bytes.Contains([]byte(err.Error()), []byte("read limited")) {
					c.close(websocket.StatusMessageTooBig, "frame larger than the limit")
				}
			}
			return
		}
		if typ != websocket.MessageText {
			c.reply(protocol.Errorf(protocol.CodeBadFrame, "frames are JSON text, not binary").Frame(""))
			continue
		}
		// Decoded first, so that a refusal names the request it refuses
		// (frames are bounded by the read limit).
		req, err := protocol.Decode(data, c.g.cfg.MaxBody)
		if !c.frames.Allow() {
			c.reply(protocol.Errorf(protocol.CodeRateLimited, "too many frames; slow down and retry (a send with the same cmid)").Frame(req.ID))
			continue
		}
		if err != nil {
			c.reply(asProtocol(err).Frame(req.ID))
			continue
		}
		if req.Op == protocol.OpSend && !c.sends.Allow() {
			c.reply(protocol.Errorf(protocol.CodeRateLimited, "more than %.0f sends per second; retry later with the same cmid", c.g.cfg.SendRate).Frame(req.ID))
			continue
		}
		ans, perr := c.g.do(c.ctx, c.uid, &req)
		switch {
		case perr != nil:
			c.reply(perr.Frame(req.ID))
		case req.ID == "" && (req.Op == protocol.OpAck || req.Op == protocol.OpRead):
			// fire and forget: no answer unless it failed
		default:
			c.reply(protocol.Marshal(ans))
		}
	}
}

// reply and push enqueue without blocking; a full queue cuts the client.
func (c *conn) reply(frame []byte) { c.enqueue(out{frame: frame}) }
func (c *conn) push(msgs [][]byte) { c.enqueue(out{msgs: msgs}) }

func (c *conn) enqueue(o out) {
	select {
	case c.queue <- o:
	default:
		c.g.metrics.slowCut.Add(1)
		c.close(CloseTooSlow, fmt.Sprintf("too slow: %d frames queued; reconnect and pull what you missed", cap(c.queue)))
	}
}

func (c *conn) writeLoop() {
	var buf bytes.Buffer
	for {
		var o out
		select {
		case <-c.ctx.Done():
			return
		case o = <-c.queue:
		}
		if o.msgs == nil {
			if !c.writeFrame(o.frame, 0) {
				return
			}
			continue
		}
		for len(o.msgs) > 0 {
			buf.Reset()
			buf.WriteString(`{"op":"push","msgs":[`)
			n := 0
			for n < len(o.msgs) && n < maxPushBatch && buf.Len() < maxPushBytes {
				if n > 0 {
					buf.WriteByte(',')
				}
				buf.Write(o.msgs[n])
				n++
			}
			buf.WriteString("]}")
			if !c.writeFrame(buf.Bytes(), n) {
				return
			}
			o.msgs = o.msgs[n:]
		}
	}
}

func (c *conn) writeFrame(frame []byte, msgs int) bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.g.cfg.WriteTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, frame); err != nil {
		if c.ctx.Err() == nil {
			c.close(CloseTooSlow, "write timed out; reconnect and pull what you missed")
		}
		return false
	}
	c.g.metrics.pushes.Add(int64(msgs))
	return true
}

// writeNow writes before the writer runs (during authentication).
func (c *conn) writeNow(frame []byte) {
	ctx, cancel := context.WithTimeout(c.ctx, c.g.cfg.WriteTimeout)
	defer cancel()
	c.ws.Write(ctx, websocket.MessageText, frame)
}

func (c *conn) pingLoop() {
	t := time.NewTicker(c.g.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.g.cfg.PingInterval)
		err := c.ws.Ping(ctx)
		cancel()
		if err != nil {
			if c.ctx.Err() == nil {
				c.close(websocket.StatusPolicyViolation, "no pong within the ping interval")
			}
			return
		}
	}
}

// close ends the connection once, with a reason the client can act on. The
// close handshake runs in the background (it waits for the peer, up to 5 s)
// so that a pusher never blocks on a slow client; serveWS waits for it.
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		go func() {
			defer close(c.closed)
			defer c.cancel()
			c.ws.Close(code, truncate(reason))
		}()
	})
}

func truncate(s string) string {
	if len(s) > 120 { // close reasons are limited to 123 bytes
		return s[:120]
	}
	return s
}

func asProtocol(err error) *protocol.Error {
	var perr *protocol.Error
	if errors.As(err, &perr) {
		return perr
	}
	return protocol.Errorf(protocol.CodeBadFrame, "%v", err)
}

func bearer(r *http.Request) string {
	if t := r.URL.Query().Get("token"); t != "" {
		return t
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && h[:7] == "Bearer " {
		return h[7:]
	}
	return ""
}
