package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// maxFrame bounds one server frame: a full page of large messages fits.
const maxFrame = 32 << 20

// frame is any server frame; which fields are set depends on Op.
type frame struct {
	Op      string             `json:"op"`
	ID      string             `json:"id"`
	Uid     string             `json:"uid"`
	MaxBody int                `json:"max_body"`
	MaxCurs int                `json:"max_cursors"`
	Gid     string             `json:"gid"`
	Cmid    string             `json:"cmid"`
	MsgID   int64              `json:"msgid"`
	After   int64              `json:"after"`
	Msgs    msgList            `json:"msgs"`
	More    bool               `json:"more"`
	Head    int64              `json:"head"`
	Groups  groupList          `json:"groups"`
	Code    protocol.Code      `json:"code"`
	Message string             `json:"message"`
	Counts  countList          `json:"counts"`
	Unknown idList             `json:"unknown"`
	Read    uidList            `json:"read"`
	Unread  uidList            `json:"unread"`
	Reason  string             `json:"reason"`
	Refused []protocol.Refusal `json:"refused"`

	err error // the answer was refused at decode: why
}

// session is one authenticated connection. It ends when its read loop ends.
type session struct {
	c      *Client
	conn   *websocket.Conn
	ctx    context.Context // ends with the session
	cancel context.CancelFunc
	uid    string
	// maxBody is the most bytes of a body the server takes, as its authed
	// frame says; 0: it does not say (a server before max_body).
	maxBody int
	// maxCursors is the most entries of a cursors frame the server takes,
	// as its authed frame says; 0: it takes none (a server before the
	// cursors op): acks and reads go one frame a group.
	maxCursors int
	done       chan struct{} // closed when the session ended; err is set then

	mu      sync.Mutex
	err     error
	waiters map[string]chan *frame
	largest int  // bytes of the largest frame written, or being written
	tooBig  bool // the server closed the connection on a frame over its size limit (1009)

	resyncing   bool // guarded by mu: a sync again (syncSoon) runs
	resyncAgain bool // guarded by mu: and another was asked meanwhile

	synced bool               // guarded by c.mu: the sync answer was applied
	early  []protocol.Message // guarded by c.mu: pushes that arrived before it
	// earlyOwed, guarded by c.mu, has the newest msgid of each group
	// pushed before the sync answer past the pushes early keeps (see
	// Client.pushBudget): pulled once synced.
	earlyOwed map[string]int64
	ended     bool // guarded by c.mu: the session ended (detach ran)
}

// connect dials, authenticates and syncs. The session lives on c.ctx; ctx
// bounds the connecting only.
func (c *Client) connect(ctx context.Context) (*session, error) {
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	tok, err := c.cfg.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: token: %w", err)
	}
	conn, resp, err := websocket.Dial(ctx, c.cfg.URL, &websocket.DialOptions{HTTPClient: c.cfg.HTTPClient})
	if err != nil {
		if rerr := refusal(resp); rerr != nil && resp.StatusCode != http.StatusNotFound {
			return nil, fmt.Errorf("client: dial: %w", rerr)
		}
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			// An HTTP answer, not an upgrade: most likely another path.
			return nil, fmt.Errorf("client: dial %s: %w; is it the gateway's WebSocket endpoint, ws://host:port/v1/ws (wss:// over TLS)?", c.cfg.URL, err)
		}
		if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" && ctx.Err() == nil {
			// Nothing answered: "connect: connection refused", "no such host".
			return nil, fmt.Errorf("client: dial: %w; is a gateway running at that address, and is Config.URL its endpoint?", err)
		}
		if ctx.Err() != nil && caller.Err() == nil {
			// The handshake's answer did not come within RequestTimeout:
			// it said "context deadline exceeded" alone.
			return nil, fmt.Errorf("client: dial: %w: no answer within Config.RequestTimeout (%v); is a gateway serving at that address (not a host or proxy that takes the connection and answers nothing)?", err, c.cfg.RequestTimeout)
		}
		return nil, fmt.Errorf("client: dial: %w", err)
	}
	conn.SetReadLimit(maxFrame)
	s := &session{c: c, conn: conn, done: make(chan struct{}), waiters: make(map[string]chan *frame)}
	s.ctx, s.cancel = context.WithCancel(c.ctx)
	// The session's end closes the connection, which ends the read loop's
	// read: one callback for the session, not one per frame read.
	context.AfterFunc(s.ctx, func() { _ = conn.CloseNow() })
	c.wg.Add(1)
	go s.readLoop()

	f, err := s.request(ctx, protocol.Request{Op: protocol.OpAuth, Token: tok})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("client: auth: %w", err)
	}
	s.uid, s.maxBody, s.maxCursors = f.Uid, f.MaxBody, f.MaxCurs
	f, err = s.request(ctx, protocol.Request{Op: protocol.OpSync})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("client: sync: %w", err)
	}
	// Not waited for (a new connection's frames are all there at the
	// gateway), but charged as it charges it: the pulls and acks after
	// it keep to the rate. A debt left by the connection before is not
	// this one's.
	c.frames.chargeAnew(1 + protocol.SyncFrames(len(f.Groups)))
	if err := c.applySync(s, f.Groups); err != nil {
		s.close()
		return nil, fmt.Errorf("client: sync: %w", err)
	}
	c.log.Debug("chat client connected", "uid", s.uid, "groups", len(f.Groups))
	return s, nil
}

// close drops the connection at once; the read loop then ends the session.
func (s *session) close() {
	_ = s.conn.CloseNow()
	<-s.done
}

func (s *session) readLoop() {
	defer s.c.wg.Done()
	for {
		_, b, err := s.conn.Read(context.Background()) // ended by closing, see connect
		if err != nil {
			s.end(err)
			return
		}
		var f frame
		if err := decodeFrame(b, &f); err != nil {
			err = fmt.Errorf("%w: %d bytes refused: %w", ErrProtocol, len(b), err)
			// An answer fails its request with the reason, at once; a
			// frame without an id is reported.
			var id struct{ ID string }
			if json.Unmarshal(b, &id) != nil || id.ID == "" {
				s.c.reportError(err)
				continue
			}
			s.c.log.Warn("chat client: undecodable server frame", "err", err)
			f = frame{ID: id.ID, err: err}
		}
		s.dispatch(&f)
	}
}

func (s *session) dispatch(f *frame) {
	switch {
	case f.Op == protocol.OpPush:
		s.c.onPush(s, f.Msgs)
	case f.Op == protocol.OpResync:
		s.resyncAsked(f.Reason)
	case f.Op == protocol.OpReceipts:
		if s.c.cfg.OnReceipts != nil {
			s.c.onReceipts(protocol.Receipts{Op: f.Op, Gid: f.Gid, Counts: f.Counts})
		}
	case f.ID != "":
		s.mu.Lock()
		ch := s.waiters[f.ID]
		delete(s.waiters, f.ID)
		s.mu.Unlock()
		if ch != nil {
			ch <- f // buffered, one answer per id
		}
	case f.Op == protocol.OpError:
		s.c.reportError(fmt.Errorf("client: server: %w", &protocol.Error{Code: f.Code, Message: f.Message}))
	default:
		s.c.log.Debug("chat client: frame ignored", "op", f.Op)
	}
}

func (s *session) end(err error) {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		s.mu.Lock()
		s.tooBig = ce.Code == websocket.StatusMessageTooBig
		s.mu.Unlock()
		err = closedError{ce}
	} else {
		err = fmt.Errorf("%w: %v", ErrDisconnected, err)
	}
	s.c.detach(s) // first: waitSession must never return an ended session
	s.mu.Lock()
	s.err = err
	s.waiters = nil
	s.mu.Unlock()
	close(s.done)
	s.cancel()
	_ = s.conn.CloseNow()
}

// closedError ends a session the server closed: it is ErrDisconnected,
// and websocket.CloseStatus reads its status.
type closedError struct{ ce websocket.CloseError }

func (e closedError) Error() string {
	return fmt.Sprintf("%v: closed by the server: %d %s", ErrDisconnected, e.ce.Code, e.ce.Reason)
}

func (e closedError) Unwrap() []error { return []error{ErrDisconnected, e.ce} }

// request writes req with a fresh id and waits for its answer. An error
// frame is returned as a *protocol.Error.
func (s *session) request(ctx context.Context, req protocol.Request) (*frame, error) {
	req.ID = strconv.FormatUint(s.c.ids.Add(1), 10)
	ch := make(chan *frame, 1)
	s.mu.Lock()
	if s.waiters == nil {
		s.mu.Unlock()
		return nil, s.err
	}
	s.waiters[req.ID] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiters, req.ID)
		s.mu.Unlock()
	}()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", req.Op, err)
	}
	s.mu.Lock()
	s.largest = max(s.largest, len(b))
	s.mu.Unlock()
	// The write gets a deadline of its own: a write cut by the caller's ctx
	// would close the connection for everyone.
	wctx, cancel := context.WithTimeout(s.ctx, s.c.cfg.RequestTimeout)
	err = s.conn.Write(wctx, websocket.MessageText, b)
	cancel()
	if err != nil {
		// The connection is done for. The read loop may still read why
		// the server closed it (see endErr): it is given a moment to.
		select {
		case <-s.done:
		case <-time.After(time.Second):
			_ = s.conn.CloseNow() // the read loop ends the session
			<-s.done
		}
		// Why the server closed it says more than the write's error, and
		// tells a close to retry (see askedToRetry) from one not to.
		var pe *protocol.Error
		if err := s.endErr(len(b)); errors.As(err, &pe) || websocket.CloseStatus(err) != -1 {
			return nil, err
		}
		return nil, fmt.Errorf("%w: write %s: %v", ErrDisconnected, req.Op, err)
	}
	var f *frame
	select {
	case f = <-ch:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		// An answer read just before the connection ended still counts.
		select {
		case f = <-ch:
		default:
			return nil, s.endErr(len(b))
		}
	}
	switch {
	case f.err != nil:
		return nil, f.err
	case f.Op == protocol.OpError:
		return nil, &protocol.Error{Code: f.Code, Message: f.Message}
	}
	return f, nil
}

// endErr is the error of a request whose frame of n bytes went out on s
// before s ended. A server closes the connection (1009) on a frame over
// its size limit, and the largest frame written is one: its request is
// refused as a body over the limit would be, not made again on the next
// connection, which it would end too. (A server that gives its body limit
// in authed is sent no body over it: see sendOnce.)
func (s *session) endErr(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tooBig && n >= s.largest {
		return &protocol.Error{Code: protocol.CodeBodyTooLarge,
			Message: fmt.Sprintf("the server closed the connection on this frame of %d bytes as over its size limit (1009); split the message", n)}
	}
	return s.err
}

// alive reports whether s has not ended.
func (s *session) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// applySync records a sync answer, makes s the ready session and processes
// the pushes that arrived before the answer.
func (c *Client) applySync(s *session, groups []protocol.GroupState) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// ended, not alive(): the session may end between here and its done
	// being closed, and an ended session must never become the ready one.
	if s.ended {
		return fmt.Errorf("%w: the connection ended as it synced", ErrDisconnected)
	}
	c.applyGroupsLocked(groups)
	if c.everSynced {
		c.stats.Reconnects++
	}
	c.everSynced = true
	s.synced = true
	for _, m := range s.early {
		c.pushLocked(m)
	}
	s.early = nil
	for gid, id := range s.earlyOwed {
		if schema.ValidID(gid) != nil || c.groups[gid] == nil && c.unnamedLocked() >= MaxUnnamedGroups {
			continue // as pushLocked drops them
		}
		if g := c.groupLocked(gid); id > g.contig {
			g.seen = true
			g.owed = max(g.owed, id)
			c.drainLocked(g)
		}
	}
	s.earlyOwed = nil
	c.sess = s
	c.uid = s.uid
	close(c.ready)
	return nil
}

// detach marks s ended and forgets it if it is the ready session.
func (c *Client) detach(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.ended = true
	if c.sess == s {
		c.sess = nil
		c.ready = make(chan struct{})
	}
}

// waitSession returns the ready session, waiting for a reconnect if needed.
// The wait ends with ErrClosed as soon as Close begins: Close waits for
// OnMessage, which may be waiting here, in a Send or an Open.
func (c *Client) waitSession(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		s, ready := c.sess, c.ready
		c.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.stopDeliver: // closed first thing by Close
			return nil, ErrClosed
		}
	}
}

// serve pings s until it ends or the client closes.
func (c *Client) serve(s *session) {
	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-c.ctx.Done():
			s.close()
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, c.cfg.RequestTimeout)
			err := s.conn.Ping(ctx)
			cancel()
			if err != nil && s.alive() {
				c.log.Warn("chat client: ping failed; reconnecting", "err", err)
				_ = s.conn.CloseNow()
			}
		}
	}
}
