package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// Close codes beyond RFC 6455's, in the 4000-4999 range for applications.
const (
	CloseUnauthenticated websocket.StatusCode = 4001 // reason says what was wrong with the token
	CloseTooSlow         websocket.StatusCode = 4008 // the client did not read fast enough: reconnect, resync
	CloseTooManyConns    websocket.StatusCode = 4029 // the user has MaxConnsPerUser connections to this gateway already
)

// Why a WebSocket was refused, as chat_connections_refused_total counts it.
const (
	refusedAuthenticating = "authenticating" // MaxAuthenticating connections had not authenticated yet: 503
	refusedUserConns      = "user_conns"     // the user had MaxConnsPerUser connections here: 4029
	refusedPresence       = "presence"       // the user's presence could not be written: 1013
	refusedStarting       = "starting"       // Run did not get this node's pushes yet: 503
	refusedCatchingUp     = "catching_up"    // no place among the clients catching up (catchUp) within catchUpWait: overloaded, 1013
)

// A push frame carries at most maxPushBatch queued messages and stops
// growing past maxPushBytes, so clients with modest read limits cope.
const (
	maxPushBatch = 256
	maxPushBytes = 256 << 10
)

// out is one queued outbound item: a whole frame, the messages of one
// fan-out batch for this connection (protocol.Message JSON each), which the
// writer turns into push frames, or a ping or pong, written as the bytes of
// a whole WebSocket control frame (see serve).
type out struct {
	frame []byte
	msgs  [][]byte
	ctl   []byte
}

// size is the bytes o holds.
func (o *out) size() int {
	n := len(o.frame) + len(o.ctl)
	for _, m := range o.msgs {
		n += len(m)
	}
	return n
}

// errAnswered is authenticate's error when the client has been answered
// and the connection closed already.
var errAnswered = protocol.Errorf(protocol.CodeUnauthenticated, "answered")

type conn struct {
	g        *Gateway
	ws       *websocket.Conn
	br       *bufio.Reader // under ws: serve peeks it while ws reads nothing
	cork     *cork         // under ws: corked while the writer writes
	uid      string
	queue    outQueue
	slot     int         // when in the ping interval it is pinged (pingConns)
	heard    atomic.Bool // the client sent something since the last ping
	handling atomic.Bool // a frame is being handled: the client's pongs wait behind it
	frames   bucket      // used by handle and awaitFrame, never at once

	coverSince atomic.Int64 // g.since of the moment the next sync must cover, 0: none (see cover.go)
	coverWatch atomic.Int64 // the coverSince a watch was started for
	pushedMu   sync.Mutex
	pushed     map[string]int64 // under pushedMu: gid -> the lowest msgid pushed since coverSince, while it is set

	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	asked  atomic.Bool          // close was asked for
	code   websocket.StatusCode // what for: set in once
	reason string
}

const shuttingDown = `{"code":"unavailable","message":"the gateway is shutting down; reconnect to another"}`

// serveWS accepts a WebSocket and hands it to a goroutine of its own, so
// that the HTTP request, its headers and the handler's grown stack are let go
// while the connection lives.
func (g *Gateway) serveWS(w http.ResponseWriter, r *http.Request) {
	if g.closing.Load() {
		http.Error(w, shuttingDown, http.StatusServiceUnavailable)
		return
	}
	// Until Run holds the node's name and is subscribed to its pushes, the
	// fan-out would publish this connection's pushes to nobody (or, while
	// a killed gateway's lease on the name lasts, to nobody for as long),
	// and the check of its first sync (cover.go) only sees what was sent
	// within presenceLag.
	if !g.ready.Load() {
		g.cfg.Metrics.Refused(refusedStarting)
		g.writeErr(w, protocol.Errorf(protocol.CodeUnavailable, "this server is starting and does not get pushes yet; retry in a few seconds, with a back-off"))
		return
	}
	// The WebSocket library refuses a browser page of another origin with
	// a bare 403 (checked again there); its operator is told what to set.
	if origin, ok := allowedOrigin(r, g.cfg.AllowedOrigins); !ok {
		if u, err := url.Parse(r.Header.Get("Origin")); err == nil && strings.EqualFold(u.Host, r.Host) {
			g.writeErr(w, protocol.Errorf(protocol.CodeForbidden, "a page served over plain %s may not connect to this server over TLS (%s); load the page from https://%s", u.Scheme, r.Host, r.Host))
			return
		}
		g.writeErr(w, protocol.Errorf(protocol.CodeForbidden, "a page of %q may not connect to this server (%s); its operator adds the host to CHAT_ALLOWED_ORIGINS", origin, r.Host))
		return
	}
	// A request that asks no upgrade (curl, a browser's address bar, or a
	// proxy that drops the hop-by-hop headers) got the library's plain
	// text: "WebSocket protocol violation: Connection header "" does not
	// contain Upgrade".
	if !asksUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
		g.writeJSON(w, http.StatusUpgradeRequired, map[string]string{"code": string(protocol.CodeInvalid),
			"message": `/v1/ws is the WebSocket endpoint, and this request asks no upgrade (it lacks "Connection: Upgrade" and "Upgrade: websocket"): ` +
				`connect with a WebSocket client (ws://, wss:// over TLS); behind a proxy or load balancer, have it pass both headers ` +
				`(nginx: proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade"). The HTTP API's routes are in PROTOCOL.md`})
		return
	}
	// Checked and counted under admitConn: a Shutdown that begins after the
	// check waits for this connection, however long its upgrade takes, and
	// no count is added while it waits.
	g.admitConn.Lock()
	if g.closing.Load() {
		g.admitConn.Unlock()
		http.Error(w, shuttingDown, http.StatusServiceUnavailable)
		return
	}
	g.wg.Add(1)
	g.admitConn.Unlock()
	// A connection holds a goroutine and its buffers until it authenticates
	// or AuthTimeout passes, and anyone may open one: past the cap the
	// upgrade is refused before it costs anything.
	if g.authN.Add(1) > int64(g.cfg.MaxAuthenticating) {
		g.authN.Add(-1)
		g.wg.Done()
		g.metrics.authRefused.Add(1)
		g.cfg.Metrics.Refused(refusedAuthenticating)
		g.writeErr(w, protocol.Errorf(protocol.CodeOverloaded, "this server holds %d connections that have not authenticated yet, the most it takes; retry in a few seconds, with a back-off", g.cfg.MaxAuthenticating))
		return
	}
	sb := &smallBuffers{ResponseWriter: w}
	ws, err := websocket.Accept(sb, r, &websocket.AcceptOptions{OriginPatterns: g.cfg.AllowedOrigins})
	if err != nil {
		g.authN.Add(-1)
		g.wg.Done()
		g.log.Debug("websocket accept failed", "err", err)
		return // Accept has answered the client
	}
	ws.SetReadLimit(g.cfg.maxFrame())
	token := strings.Clone(wsToken(r))
	go g.runConn(ws, sb, token)
}

// asksUpgrade reports whether r asks for a WebSocket: Connection names
// Upgrade and Upgrade names websocket. The rest of the handshake the
// WebSocket library checks.
func asksUpgrade(r *http.Request) bool {
	has := func(header, token string) bool {
		for _, v := range r.Header.Values(header) {
			for _, t := range strings.Split(v, ",") {
				if strings.EqualFold(strings.TrimSpace(t), token) {
					return true
				}
			}
		}
		return false
	}
	return has("Connection", "upgrade") && has("Upgrade", "websocket")
}

// runConn runs one connection until it closes.
func (g *Gateway) runConn(ws *websocket.Conn, sb *smallBuffers, token string) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{g: g, ws: ws, br: sb.br, cork: sb.cork, queue: outQueue{limit: g.cfg.QueueSize, maxB: g.cfg.QueueBytes}, ctx: ctx, cancel: cancel}

	g.authing.Store(c, true) // Shutdown closes it too
	if g.closing.Load() {
		// Shutdown began as it was upgraded, and may have listed the
		// connections authenticating before this one joined them: it
		// would wait for an auth frame until AuthTimeout.
		c.close(websocket.StatusGoingAway, shutdownReason)
	}
	uid, id, perr := c.authenticate(token)
	closeCode := CloseUnauthenticated
	// The connection's setup (its user's presence) takes a place among
	// the clients catching up, as its sync and pulls will: a gateway's
	// clients all coming back at once wait their turn, or come back later.
	setup := perr == nil && g.catchUp.enter(c.ctx)
	if perr == nil && !setup {
		perr, closeCode = protocol.Errorf(protocol.CodeOverloaded, "the server has more clients catching up than it can take in time; reconnect after a back-off"), websocket.StatusTryAgainLater
		g.metrics.catchUpRefused.Add(1)
		g.cfg.Metrics.Refused(refusedCatchingUp)
	}
	if perr == nil {
		if g.hub.admit(uid, g.cfg.MaxConnsPerUser) {
			c.writeNow(protocol.Marshal(protocol.Authed{Op: protocol.OpAuthed, ID: id, Uid: uid, MaxBody: g.cfg.MaxBody, MaxCursors: protocol.MaxCursors}))
		} else {
			perr, closeCode = protocol.Errorf(protocol.CodeRateLimited, "%s has %d connections to this server already, the most it takes; close one and reconnect", uid, g.cfg.MaxConnsPerUser), CloseTooManyConns
			g.cfg.Metrics.Refused(refusedUserConns)
		}
	}
	g.authing.Delete(c)
	g.authN.Add(-1)
	if perr != nil {
		if setup {
			g.catchUp.leave()
		}
		if perr != errAnswered && !c.closing() {
			c.writeNow(perr.Frame(id))
			c.close(closeCode, string(perr.Code)+": "+perr.Message)
		}
		c.end()
		g.wg.Done()
		return
	}
	c.uid = uid
	c.heard.Store(true) // before connect: pingConns may ping it from then on
	g.connect(c)
	g.catchUp.leave()
	c.coverFrom(g.since()) // after the presence: the fan-out may have missed it before
	if g.closing.Load() {
		// Shutdown began as it authenticated, and may have listed the
		// connections before this one joined them.
		c.close(websocket.StatusGoingAway, shutdownReason)
	}
	// The read loop gets a fresh goroutine: authenticating grew this one's
	// stack (JSON, the token's HMAC), and a goroutine blocked in a read
	// keeps its stack for as long as the connection lives, mostly idle.
	go c.serve()
}

// smallBuffers hands the WebSocket smaller buffers than net/http's 4 KiB
// each way: they live as long as the connection, idle or not. Client frames
// are small; a frame larger than the read buffer is read past it. Writes go
// through a cork (see cork), whose buffer comes from a pool while the
// connection's writer writes, so the WebSocket's own write buffer holds
// no more than a control frame.
type smallBuffers struct {
	http.ResponseWriter
	br   *bufio.Reader // set by Hijack
	cork *cork
}

// The write buffer holds a whole control frame (2 + 125 bytes), so that
// the WebSocket hands each pong or close frame it writes to the cork in one
// Write: the cork's own frames are written between two of them, never into
// one, and the cork knows the close frame by its first byte.
const (
	readBuffer  = 256 // at least a whole control frame: serve peeks one
	writeBuffer = 128
)

func (s *smallBuffers) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("gateway: the HTTP server cannot hand over connections")
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// Bytes the client sent early sit in net/http's reader: they must sit
	// in ours, buffered, since the WebSocket resets it on its connection.
	br := bufio.NewReaderSize(nc, readBuffer)
	if early, _ := brw.Reader.Peek(brw.Reader.Buffered()); len(early) > 0 {
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(early)), nc), max(readBuffer, len(early)))
		if _, err := br.Peek(len(early)); err != nil {
			return nil, nil, fmt.Errorf("gateway: taking over a connection: %w", err)
		}
	}
	s.br, s.cork = br, &cork{nc: nc}
	return nc, bufio.NewReadWriter(br, bufio.NewWriterSize(s.cork, writeBuffer)), nil
}

// close asks for the connection to end, once, with a reason the client can
// act on, and returns at once, so that a pusher never blocks on a slow
// client. It wakes the connection's reader (its read fails), which runs
// the close handshake (end).
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		c.code, c.reason = code, truncate(reason)
		c.asked.Store(true)
		c.cork.nc.SetReadDeadline(time.Unix(1, 0))
	})
}

// closing reports whether close was asked for.
func (c *conn) closing() bool { return c.asked.Load() }

// end runs the close handshake with what close asked for (a normal
// closure if nothing was): it sends the close frame and waits up to 5 s
// for the client's. It runs on the goroutine that reads the connection,
// and when no read is under way: the handshake reads the connection too.
func (c *conn) end() {
	c.close(websocket.StatusNormalClosure, "")
	c.cork.nc.SetReadDeadline(time.Time{})
	c.ws.Close(c.code, c.reason)
	c.cancel()
}

// truncate cuts s to fit a close reason (at most 123 bytes) at a
// character boundary: a reason must be UTF-8.
func truncate(s string) string {
	if len(s) <= 120 {
		return s
	}
	n := 120
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func asProtocol(err error) *protocol.Error {
	var perr *protocol.Error
	if errors.As(err, &perr) {
		return perr
	}
	return protocol.Errorf(protocol.CodeBadFrame, "%v", err)
}

func bearer(r *http.Request) string {
	// The scheme is case-insensitive (RFC 9110): "bearer" is "Bearer".
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// wsToken is the token of a WebSocket upgrade: in the URL, as browsers
// must give it (their WebSocket cannot set headers), or in the header.
// The HTTP API takes the header only, so that its tokens, the admin token
// above all, stay out of access logs.
func wsToken(r *http.Request) string {
	if t := r.URL.Query().Get("token"); t != "" {
		return t
	}
	return bearer(r)
}
