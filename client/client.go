package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// Errors returned by the client. Protocol errors from the server are
// *protocol.Error values, wrapped.
var (
	ErrClosed       = errors.New("client: closed: Close was called on this Client; Dial a new one to go on")
	ErrDisconnected = errors.New("client: disconnected")
	ErrNotReceived  = errors.New("client: beyond the messages received")
	// ErrProtocol wraps the refusal of a server frame the client cannot
	// take: not JSON of the protocol, or a list longer than a server sends
	// (a server fault). An answer so refused fails its request with it; a
	// push or another frame without an id goes to OnError.
	ErrProtocol = errors.New("client: a server frame against the protocol")
)

// Config configures a Client. Zero values take the defaults written beside
// each field.
type Config struct {
	URL            string                                    // ws://host:port/v1/ws; required
	Token          func(ctx context.Context) (string, error) // required; called on every (re)connect
	AckEvery       int                                       // default 10: ack after this many new contiguous messages of a group
	AckInterval    time.Duration                             // default 1s: or after this long, whichever first; also on Close
	SendTimeout    time.Duration                             // default 5s: resend with the same cmid after this (and a back-off)
	RequestTimeout time.Duration                             // default 10s: dial, auth, sync, pull, ack and read answers
	PingInterval   time.Duration                             // default 30s: a connection that misses a pong is dropped
	MinBackoff     time.Duration                             // default 100ms: first reconnect delay (and a fifth of the first overload pause), doubled up to MaxBackoff, with jitter
	MaxBackoff     time.Duration                             // default 10s; the reconnect delay restarts at MinBackoff only after a connection that lasted this long
	RedialSpread   time.Duration                             // default MaxBackoff/5 (2s); negative: none. The first reconnect after a connection ends waits a random time up to this besides the back-off, so that the clients of a gateway that went away come back spread out, not in one wave
	PageSize       int                                       // default 200, at most protocol.MaxLimit: messages per pull
	MaxSending     int                                       // default 32: sends in flight at once; more wait, and fewer after the server says overloaded
	MaxQueued      int                                       // default 10,000: pulls wait while this many messages wait for OnMessage; and pushes of a group held behind a gap, the rest pulled
	FrameRate      float64                                   // default 100: the client's own frames (acks, reads, pulls, syncs: one more per protocol.SyncPer groups) a second, at most: half a gateway's per connection (200, bursts of 400), over which it refuses frames as rate_limited, sends among them
	FrameBurst     int                                       // default 100: and at most this many at once
	MaxAcking      int                                       // default 16: acks and reads in flight at once
	ResyncPulls    int                                       // default 8: pulls in flight at once when a reconnect (or a resync frame) pulls the groups with new messages; each keeps to FrameRate. 8 pages of at most 1 MiB each are half a gateway's outbound queue (16 MiB), past which it cuts the connection as too slow
	DedupWindow    time.Duration                             // default 24h, the server's (store.RedisConfig.DedupWindow): a message of a group's sender and client_msg_id sent (sent_at) within this of an earlier one is a second record of that send, not handed to OnMessage; past it, a new message
	DedupSends     int                                       // default 10,000: the sends (group, sender, client_msg_id) of the newest messages handed to OnMessage remembered, of all groups together, to tell second records by; about 60 bytes each
	OnMessage      func(protocol.Message)                    // optional: once per message, msgid order per group, from one goroutine
	OnError        func(error)                               // optional: asynchronous errors, serialised
	OnReceipts     func(protocol.Receipts)                   // optional: new read counts of your messages; called from the reader goroutine: must not block, nor call ReadCounts or WhoRead (they wait for that goroutine); Close returns at once from it, as from OnMessage
	Logger         *slog.Logger                              // default: discard
	// HTTPClient dials the WebSocket: its transport's TLS config trusts a
	// private CA of wss:// URLs, its proxy is used. Default
	// http.DefaultClient (the system's CAs, the environment's proxy).
	HTTPClient *http.Client
}

func (c *Config) setDefaults() {
	if c.AckEvery == 0 {
		c.AckEvery = 10
	}
	if c.AckInterval == 0 {
		c.AckInterval = time.Second
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = 5 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.PingInterval == 0 {
		c.PingInterval = 30 * time.Second
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.RedialSpread == 0 {
		c.RedialSpread = c.MaxBackoff / 5
	}
	if c.PageSize == 0 {
		c.PageSize = 200
	}
	if c.MaxSending == 0 {
		c.MaxSending = 32
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = 10_000
	}
	if c.FrameRate == 0 {
		c.FrameRate = 100
	}
	if c.FrameBurst == 0 {
		c.FrameBurst = 100
	}
	if c.MaxAcking == 0 {
		c.MaxAcking = 16
	}
	if c.ResyncPulls == 0 {
		c.ResyncPulls = 8
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 24 * time.Hour
	}
	if c.DedupSends == 0 {
		c.DedupSends = 10_000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports the first invalid field, with the zero fields at their
// defaults as Dial takes them.
func (c *Config) Validate() error {
	d := *c
	d.setDefaults()
	return d.validate()
}

func (c *Config) validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return errors.New("client: config: URL is required: the gateway's WebSocket endpoint, e.g. ws://localhost:8080/v1/ws (wss:// over TLS)")
	case !strings.Contains(c.URL, "://"):
		// "localhost:8080/v1/ws" parses with the scheme "localhost", and
		// "127.0.0.1:8080/v1/ws" not at all ("first path segment in URL
		// cannot contain colon").
		return fmt.Errorf("client: config: URL %q has no scheme: want ws://%s (wss:// over TLS)", c.URL, c.URL)
	case err != nil:
		return fmt.Errorf("client: config: URL: %w; want the gateway's WebSocket endpoint, e.g. ws://localhost:8080/v1/ws", err)
	case u.Scheme != "ws" && u.Scheme != "wss" && u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("client: config: URL scheme %q: want ws or wss", u.Scheme)
	case c.Token == nil:
		return errors.New("client: config: Token is required")
	case c.AckEvery < 1:
		return fmt.Errorf("client: config: AckEvery %d: want at least 1", c.AckEvery)
	case c.PageSize < 1 || c.PageSize > protocol.MaxLimit:
		return fmt.Errorf("client: config: PageSize %d: want 1 to %d", c.PageSize, protocol.MaxLimit)
	case c.MaxSending < 1:
		return fmt.Errorf("client: config: MaxSending %d: want at least 1", c.MaxSending)
	case c.MaxQueued < 2:
		return fmt.Errorf("client: config: MaxQueued %d: want at least 2", c.MaxQueued)
	case !(c.FrameRate > 0) || c.FrameBurst < 1:
		return fmt.Errorf("client: config: FrameRate %v, FrameBurst %d: want more than 0 and at least 1", c.FrameRate, c.FrameBurst)
	case c.MaxAcking < 1:
		return fmt.Errorf("client: config: MaxAcking %d: want at least 1", c.MaxAcking)
	case c.ResyncPulls < 1:
		return fmt.Errorf("client: config: ResyncPulls %d: want at least 1 (1: one pull after another)", c.ResyncPulls)
	case c.DedupWindow < time.Millisecond:
		return fmt.Errorf("client: config: DedupWindow %v: want at least 1ms", c.DedupWindow)
	case c.DedupSends < 1:
		return fmt.Errorf("client: config: DedupSends %d: want at least 1", c.DedupSends)
	case c.AckInterval < 0:
		return negative("AckInterval", c.AckInterval)
	case c.SendTimeout < 0:
		return negative("SendTimeout", c.SendTimeout)
	case c.RequestTimeout < 0:
		return negative("RequestTimeout", c.RequestTimeout)
	case c.PingInterval < 0:
		return negative("PingInterval", c.PingInterval)
	case c.MinBackoff < 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("client: config: back-off %v..%v: want 0 <= MinBackoff <= MaxBackoff", c.MinBackoff, c.MaxBackoff)
	}
	return nil
}

// negative refuses a duration of Config that is below 0. The refusal said
// "durations must not be negative", naming none of four.
func negative(field string, d time.Duration) error {
	return fmt.Errorf("client: config: %s %v is negative: want 0 (its default) or more", field, d)
}

// Stats counts what the client did since Dial.
type Stats struct {
	Pushes        int64 // messages received by push
	Pulled        int64 // messages received in pull pages
	Duplicates    int64 // messages dropped because their msgid was already received, or their send was (sender and client_msg_id)
	Gaps          int64 // pushes whose prev was not the contiguous cursor, or unknown (outside a pull)
	Pulls         int64 // pull requests sent
	Delivered     int64 // OnMessage calls
	Acks          int64 // acks sent: ack frames, and acks in cursors frames
	Reads         int64 // reads sent: read frames, and reads in cursors frames
	CursorFrames  int64 // cursors frames sent: the acks and reads of many groups each, to a server that takes them (its authed frame's max_cursors)
	Resends       int64 // sends repeated with the same cmid
	Overloaded    int64 // sends the server refused as overloaded (each waited and was resent)
	RateLimited   int64 // sends the server refused as over the user's rate (each waited out the same pause and was resent)
	Reconnects    int64 // connections made after the first
	Resyncs       int64 // syncs made again on a connection: the server asked (pushes may have been lost), or a group was taken up again (Retakes); coalesced
	Retakes       int64 // groups taken up again from the ack cursor after an ack refused as beyond_head
	RetakesWaited int64 // retakes whose sync waited (1 s doubling to 1 min): a group taken up again twice or more in a row, no cursor of it accepted between
	UnnamedDrops  int64 // pushes dropped, of a group no sync named while the client kept MaxUnnamedGroups such groups
}

// Client is a connection to a gateway that reconnects by itself. Create it
// with Dial; see the package documentation for the rules it keeps.
type Client struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // ends on Close: stops every goroutine
	cancel context.CancelFunc
	wg     sync.WaitGroup // run loop, read loops, gap pulls
	ids    atomic.Uint64  // request ids

	mu            sync.Mutex
	closing       bool
	everSynced    bool          // a session was made ready before: the next one is a reconnect
	sess          *session      // the ready session, nil while disconnected
	ready         chan struct{} // closed when sess is set
	groups        map[string]*group
	due           map[*group]bool // the groups with an ack or read due (ackDue or readDue set): the ack loop looks at these only
	lastSync      []protocol.GroupState
	named         map[string]bool    // the gids of lastSync
	uid           string             // the user the server authenticated, as of the last session
	connErr       error              // the last attempt to connect failed so; nil once one succeeds
	forgotten     map[string]forgot  // groups dropped, and how far they were delivered (dropLocked)
	forgotOrder   []forgotAt         // the order they were forgotten in, oldest first
	forgetSeq     uint64             // groups forgotten so far
	dropWarned    bool               // a push was dropped for MaxUnnamedGroups since the last sync: logged
	queue         []protocol.Message // accepted, not yet handed to OnMessage
	held          int                // pushes held behind gaps, in every group's buf
	stats         Stats
	sending       *window
	frames        *pacer        // the budget of acks, reads and pulls
	resyncPulls   chan struct{} // a slot for each pull of a resync in flight, ResyncPulls in all: resyncs that overlap share them
	limitedWarned bool          // an ack or read refused as rate_limited was reported, none accepted since
	sends         sendSet       // the sends of the messages handed to OnMessage

	deliverKick chan struct{}
	stopDeliver chan struct{} // closed as Close begins: ends delivery, and the waits of Send and Open
	deliverDone chan struct{}
	ackKick     chan struct{}
	ackCtx      context.Context
	ackCancel   context.CancelFunc
	ackerDone   chan struct{}
	closed      chan struct{} // closed once Close has done its work (shutdown)
	closeErr    error         // Close's error; set before closed is closed

	callbacks atomic.Int32 // calls of OnMessage, OnError and OnReceipts running
	errMu     sync.Mutex   // serialises OnError
}

// Dial connects to cfg.URL, authenticates and syncs. Afterwards the client
// reconnects by itself until Close. ctx bounds this first connection only.
//
// A first connection the server asks to be made again is made again, after
// MinBackoff doubling to MaxBackoff (with jitter) as reconnects are, until
// ctx ends: one closed with 1013 (try again later), 1012 (service restart)
// or 1001 (going away), or one whose upgrade (a gateway's 503), auth or
// sync is refused as unavailable or overloaded. Each such failure goes to
// OnError; if ctx ends first, the error wraps both ctx's error and the
// server's last (read its close status with websocket.CloseStatus, its
// code with errors.As and a *protocol.Error). Any other failure fails Dial
// at once: a bad token, a server that refuses the connection or answers
// something else.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{
		cfg:         cfg,
		log:         cfg.Logger,
		ready:       make(chan struct{}),
		groups:      make(map[string]*group),
		due:         make(map[*group]bool),
		deliverKick: make(chan struct{}, 1),
		stopDeliver: make(chan struct{}),
		deliverDone: make(chan struct{}),
		ackKick:     make(chan struct{}, 1),
		ackerDone:   make(chan struct{}),
		closed:      make(chan struct{}),
		// A refused send pauses the client's sends for 5 back-offs at first.
		sending:     newWindow(cfg.MaxSending, backoff{min: min(5*cfg.MinBackoff, cfg.MaxBackoff), max: cfg.MaxBackoff}),
		frames:      newPacer(cfg.FrameRate, cfg.FrameBurst),
		resyncPulls: make(chan struct{}, cfg.ResyncPulls),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.ackCtx, c.ackCancel = context.WithCancel(c.ctx)
	s, err := c.connectFirst(ctx)
	if err != nil {
		c.cancel()
		c.ackCancel()
		c.wg.Wait()
		return nil, err
	}
	go c.deliverLoop()
	go c.ackLoop()
	c.wg.Add(1)
	go c.run(s)
	return c, nil
}

// Close flushes the pending acks and reads (at FrameRate, bounded by
// RequestTimeout), closes the connection and waits for the client's
// goroutines to end. A server that does not answer (gone without a FIN)
// holds it about RequestTimeout in all: the connection is then dropped,
// not closed with a handshake that would wait for its close frame. Not
// connected, Close sends nothing and returns at once. An error means some
// acks could not be sent; those messages will be delivered again to the
// next Client of the user. Every Close after the first waits for the
// first to end and returns its error.
//
// Close may be called from OnMessage, OnError or OnReceipts (a bot that
// stops on a message saying so): it then begins the same closing and
// returns nil at once, without waiting for the callback that called it.
// Once the callback returns, no message is handed to OnMessage again (the
// message whose OnMessage called Close counts as delivered, and is acked),
// the pending acks and reads are flushed, and the client's goroutines end;
// Done is closed then, and a Close from another goroutine waits for it and
// returns the flush's error. A callback must not wait for a Close on
// another goroutine, nor for Done: that Close waits for the callback. (A
// callback is told by the client's frames on the caller's stack: a Close
// of this Client from a callback of another, while one of this Client's
// runs, returns at once too.)
func (c *Client) Close() error {
	fromCallback := c.callbacks.Load() > 0 && inCallback()
	c.mu.Lock()
	first := !c.closing
	c.closing = true
	c.mu.Unlock()
	if first {
		close(c.stopDeliver) // ends delivery, and the waits of Send, Open...
		if fromCallback {
			go c.shutdown()
		} else {
			c.shutdown()
		}
	}
	if fromCallback {
		select {
		case <-c.closed:
			return c.closeErr
		default:
			return nil
		}
	}
	<-c.closed
	return c.closeErr
}

// shutdown is Close's work once delivery is told to stop: it waits for
// OnMessage to return, flushes the acks and reads, closes the connection
// and waits for the client's goroutines; then it closes c.closed.
func (c *Client) shutdown() {
	<-c.deliverDone
	c.ackCancel()
	<-c.ackerDone

	fctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
	err := c.flush(fctx)
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s != nil {
		// The close handshake waits up to 5 s for the server's close
		// frame, 10 s if its send buffer is full: only with a server that
		// answers a ping within what is left of RequestTimeout. Of a
		// server gone silent (its acks were not answered), the connection
		// is dropped.
		if fctx.Err() == nil && s.conn.Ping(fctx) == nil {
			_ = s.conn.Close(websocket.StatusNormalClosure, "client closed")
		} else {
			_ = s.conn.CloseNow()
		}
	}
	cancel()
	c.cancel()
	c.wg.Wait()
	if err != nil {
		c.closeErr = fmt.Errorf("client: close: not every ack and read was sent; the server keeps the cursors it had, so this user's next client gets the messages after them again: %w", err)
		c.log.Warn("chat client: close", "err", c.closeErr)
	}
	close(c.closed)
}

// Done returns a channel closed once the client has closed: Close (from
// any goroutine, or from a callback) has flushed the acks and reads,
// closed the connection, and every goroutine of the client has ended.
func (c *Client) Done() <-chan struct{} { return c.closed }

// UID returns the user the server authenticated the token as (its
// authed frame), as of the last connection: a bot tells its own
// messages by it.
func (c *Client) UID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.uid
}

// Groups returns the user's groups as of the last sync (counts only).
func (c *Client) Groups() []protocol.GroupState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lastSync)
}

// Cursor returns, for group gid, the ack cursor the server confirmed (or
// refused for good, as for a member removed: the client owes it nothing up
// to there) and the client's contiguous cursor (every message up to it
// received). Both are -1 for a group the client knows nothing of.
func (c *Client) Cursor(gid string) (ackedUpto, contiguousUpto int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[gid]
	if g == nil {
		return -1, -1
	}
	return g.acked, g.contig
}

// Stats returns the counters since Dial.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// reportError logs err and hands it to OnError. Never call it holding c.mu.
func (c *Client) reportError(err error) {
	if err == nil {
		return
	}
	c.log.Warn("chat client", "err", err)
	if c.cfg.OnError == nil {
		return
	}
	c.errMu.Lock()
	defer c.errMu.Unlock()
	c.onError(err)
}

func (c *Client) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}
