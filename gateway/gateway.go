package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// Gateway serves clients. Create it with New, serve Handler, run Run, and
// stop with Shutdown.
type Gateway struct {
	cfg Config
	log *slog.Logger
	hub *hub

	wg        sync.WaitGroup // connections being served
	admitConn sync.Mutex     // orders a connection's wg.Add before Shutdown's Wait
	closing   atomic.Bool
	pingSlot  atomic.Int64 // the last connection's (pingConns)
	metrics   Metrics
	admit     *admission
	catchUp   *catchUp     // connection setups, syncs and pulls: apart from admit's sends
	sends     userBuckets  // users' send rates: their connections' and HTTP sends together
	httpUsers httpUsers    // users' HTTP requests: their rate, and those in hand
	authing   sync.Map     // *conn → true: connections authenticating
	authN     atomic.Int64 // connections upgraded and not yet past authentication
	instance  string       // this process's claim on cfg.Node (see node.go)
	leaseEnds atomic.Int64 // since() when the lease last renewed ends (see node.go)
	ready     atomic.Bool  // the node's name is held and its pushes are subscribed to
	nodeMu    sync.RWMutex
	released  bool // under nodeMu: Run let the name go, and the presence under it may be a successor's

	epoch      time.Time   // the gateway's start, for since
	ends       sharedRead  // the log's ends, for syncs that check what they cover
	storedRead sharedRead  // the persister's position, for the syncs that check
	stored     storedWatch // the persister's position, for connections waiting on it
	reads      coverReads  // what the checks read; tests replace them
	leftHeads  leftHeadCache
	readStates readStates
	syncReads  chan struct{} // a slot for each read of a sync's cursors under way (see memberCursors)

	presenceLag  time.Duration // see presenceLag; tests shorten it
	presenceLost atomic.Bool   // presence set again after a Redis reconnect failed: the next refresh announces it (refreshPresence)
	presenceKick chan struct{} // has refreshPresence retry soon: presenceLost was set

	resyncAsk chan string // see askResync
	pace      resyncPace

	// dropPush, when set, drops pushes to a user (tests of lost pushes).
	dropPush func(uid string) bool
	// quietOnline, when set, keeps a user's coming online here from being
	// announced (tests of a fan-out that missed the announcement).
	quietOnline func(uid string) bool
	// beforeOffline, when set, runs as a user's last connection here has
	// gone, before their presence is cleared (tests of a reconnect racing it).
	beforeOffline func(uid string)
	// authTimedOut, when set, runs as the time to authenticate has run
	// out, before the answer (tests of an auth frame racing it).
	authTimedOut func()
}

// Metrics are the gateway's counters since start.
type Metrics struct {
	conns, sends, acks, reads, pulls, pushes, slowCut, overloaded, resyncs, authRefused, presenceRefused, catchUpRefused atomic.Int64
}

// Snapshot is a copy of the counters.
type Snapshot struct {
	Conns, Sends, Acks, Reads, Pulls, Pushes, SlowCut int64
	Overloaded                                        int64 // sends refused as overloaded
	SendBound                                         int   // the admission's bound now
	Resyncs                                           int64 // resync frames sent
	AuthRefused                                       int64 // upgrades refused: MaxAuthenticating connections were authenticating
	PresenceRefused                                   int64 // connections closed (1013) as their user's presence could not be written
	CatchUpBound                                      int   // the bound of connection setups, syncs and pulls now
	CatchUpRefused                                    int64 // connection setups, syncs and pulls refused as overloaded: no place within catchUpWait
}

// Stats returns the counters.
func (g *Gateway) Stats() Snapshot {
	m := &g.metrics
	return Snapshot{m.conns.Load(), m.sends.Load(), m.acks.Load(), m.reads.Load(), m.pulls.Load(), m.pushes.Load(), m.slowCut.Load(),
		m.overloaded.Load(), g.admit.bound(), m.resyncs.Load(), m.authRefused.Load(), m.presenceRefused.Load(),
		g.catchUp.bound(), m.catchUpRefused.Load()}
}

// New checks cfg and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Metrics.Gateway([]string{refusedAuthenticating, refusedUserConns, refusedPresence, refusedStarting, refusedCatchingUp},
		[]string{protocol.ResyncPushRoute, protocol.ResyncLateStore, protocol.ResyncPresence})
	admit, catchUp := newAdmission(cfg.SendTarget, cfg.MaxSending), newCatchUp(cfg.SendTarget, cfg.MaxCatchingUp)
	admit.catchUp = catchUp
	return &Gateway{cfg: cfg, log: cfg.Logger.With("node", cfg.Node), hub: newHub(),
		admit: admit, catchUp: catchUp, instance: newInstance(), epoch: time.Now(),
		reads: newCoverReads(cfg), presenceLag: presenceLag, syncReads: make(chan struct{}, syncReadSlots(cfg.Redis.Client())), resyncAsk: make(chan string, 1), presenceKick: make(chan struct{}, 1), pace: resyncPace{resyncBurst, resyncTick}}, nil
}

// since is the time since the gateway's start, monotonic and never 0.
func (g *Gateway) since() time.Duration { return time.Since(g.epoch) + 1 }

// Node is the name under which this gateway registers presence.
func (g *Gateway) Node() string { return g.cfg.Node }

// Handler serves the WebSocket endpoint (/v1/ws), the HTTP API and, when
// configured, administration and dev tokens.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ws", g.serveWS)
	g.routes(mux)
	return mux
}

// Run takes the node's name (see holdNode), then delivers pushes to this
// node's connections, pings them and keeps their presence fresh until ctx
// ends.
func (g *Gateway) Run(ctx context.Context) error {
	if err := g.holdNode(ctx); err != nil {
		return err
	}
	// Whatever ends deliver ends the loops too, before the name is let go:
	// a renewal after the release would hold it for a restart to wait out.
	ctx, cancel := context.WithCancel(ctx)
	var loops sync.WaitGroup
	defer func() {
		cancel()
		loops.Wait()
		g.releaseNode()
	}()
	for _, loop := range []func(context.Context){g.keepNode, g.refreshPresence, g.pingConns, g.resyncConns} {
		loops.Add(1)
		go func() { defer loops.Done(); loop(ctx) }()
	}
	return g.deliver(ctx)
}

// Ready tells whether Run holds the node's name and gets its pushes;
// until then WebSockets are refused (503, unavailable). A lease whose
// renewals failed (Redis down) until it ended is not held: another
// gateway may take the name, and presence written meanwhile failed too.
func (g *Gateway) Ready() bool {
	return g.ready.Load() && int64(g.since()) < g.leaseEnds.Load()
}

// Shutdown stops accepting connections, closes the open ones with "going
// away" (clients reconnect elsewhere and resync) and waits for them, or
// until ctx ends.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.admitConn.Lock()
	g.closing.Store(true)
	g.admitConn.Unlock()
	g.authing.Range(func(c, _ any) bool {
		c.(*conn).close(websocket.StatusGoingAway, shutdownReason)
		return true
	})
	g.drain(ctx, g.hub.all())
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

const shutdownReason = "server shutting down; reconnect"

// drain closes conns as going away, at most DrainRate a second and within
// half the time ctx leaves, in a stream: closed in one loop, they would all
// reconnect to the other gateways at once. The connections still open are
// served meanwhile; ctx ending closes the rest at once.
func (g *Gateway) drain(ctx context.Context, conns []*conn) {
	span := time.Duration(len(conns)) * time.Second / time.Duration(g.cfg.DrainRate)
	if deadline, ok := ctx.Deadline(); ok {
		span = min(span, time.Until(deadline)/2)
	}
	start := time.Now()
	for i, c := range conns {
		if at := start.Add(span * time.Duration(i) / time.Duration(len(conns))); ctx.Err() == nil && time.Until(at) > 0 {
			t := time.NewTimer(time.Until(at))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		c.close(websocket.StatusGoingAway, shutdownReason)
	}
}

func sortGroups(gs []protocol.GroupState) {
	sort.Slice(gs, func(i, j int) bool { return gs[i].Gid < gs[j].Gid })
}
