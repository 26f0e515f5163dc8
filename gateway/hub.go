package gateway

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
)

// hub knows this node's connections by user and keeps their presence in
// Redis: a user's first connection here announces them online, the last one
// gone takes them off, and a refresh keeps the entries from expiring.
//
// A user's connections are a slice, not a set: most users have one or two
// devices, and a slice of one costs 8 bytes where a map costs hundreds.
type hub struct {
	mu         sync.RWMutex
	users      map[string][]*conn
	admitted   map[string]int           // connections admitted (admit) and not yet added, by user
	announcing map[string]*announcement // by user: their presence here is being written, or could not be
}

func newHub() *hub {
	return &hub{users: map[string][]*conn{}, admitted: map[string]int{}, announcing: map[string]*announcement{}}
}

// announcement is the writing of a user's presence on this node. All of
// the user's connections here rely on it: the fan-out pushes to none of
// them until it is written. A connection that comes while it runs waits
// for it; when it fails, every connection of the user here is closed, and
// the next one to come writes it again.
type announcement struct {
	done chan struct{} // closed when the write has ended
	err  error         // set before done is closed
}

func newAnnouncement() *announcement { return &announcement{done: make(chan struct{})} }

// failed reports whether the write has ended and failed.
func (a *announcement) failed() bool {
	select {
	case <-a.done:
		return a.err != nil
	default:
		return false
	}
}

// admit takes a place for a connection of uid unless uid has max
// connections here already, counting those admitted and not yet added.
// A connection admitted is then added (add).
func (h *hub) admit(uid string, max int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.users[uid])+h.admitted[uid] >= max {
		return false
	}
	h.admitted[uid]++
	return true
}

// add adds c, admitted before, and returns the announcement of its user
// that c relies on: mine when the caller is to write it (c is the user's
// first connection here, or the last write failed), nil when the presence
// is written already.
func (h *hub) add(c *conn) (a *announcement, mine bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.admitted[c.uid]--; h.admitted[c.uid] <= 0 {
		delete(h.admitted, c.uid)
	}
	set := append(h.users[c.uid], c)
	h.users[c.uid] = set
	if a = h.announcing[c.uid]; len(set) == 1 || a != nil && a.failed() {
		a = newAnnouncement()
		h.announcing[c.uid] = a
		return a, true
	}
	return a, false
}

// reannounce begins a new announcement of uid, which the caller is to
// write, if uid has connections here; else it returns nil.
func (h *hub) reannounce(uid string) *announcement {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.users[uid]) == 0 {
		return nil
	}
	a := newAnnouncement()
	h.announcing[uid] = a
	return a
}

// announced ends a with the write's err. If it failed, and no later
// announcement of uid has begun meanwhile, it returns the connections of
// uid here, which relied on it.
func (h *hub) announced(uid string, a *announcement, err error) []*conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.err = err
	close(a.done)
	if h.announcing[uid] != a {
		return nil // the user has left, or a later announcement decides
	}
	if err == nil {
		delete(h.announcing, uid)
		return nil
	}
	return slices.Clone(h.users[uid])
}

func (h *hub) remove(c *conn) (last bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.users[c.uid]
	if i := slices.Index(set, c); i >= 0 {
		set = slices.Delete(set, i, i+1)
	}
	if len(set) == 0 {
		delete(h.users, c.uid)
		delete(h.announcing, c.uid)
		return true
	}
	h.users[c.uid] = set
	return false
}

// each calls fn for every connection of uid on this node.
func (h *hub) each(uid string, fn func(*conn)) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, c := range h.users[uid] {
		fn(c)
	}
}

func (h *hub) uids() []string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	out := make([]string, 0, len(h.users))
	for u := range h.users {
		out = append(out, u)
	}
	return out
}

func (h *hub) all() []*conn {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var out []*conn
	for _, set := range h.users {
		out = append(out, set...)
	}
	return out
}

func (h *hub) count() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, set := range h.users {
		n += len(set)
	}
	return n
}

// connect registers an authenticated connection. It returns once the
// user's presence here is written, or c is closed because it could not be.
func (g *Gateway) connect(c *conn) {
	c.slot = int(g.pingSlot.Add(1) % pingSlots)
	if a, mine := g.hub.add(c); mine {
		g.announce(c.uid, a)
	} else if a != nil {
		<-a.done // begun for an earlier connection of the user
	}
	g.metrics.conns.Add(1)
	g.cfg.Metrics.ConnOpened()
}

// announceWithin bounds the writing of a user's presence, retries
// included. A connection whose user could not be announced online is not
// served: the fan-out would push it nothing, and the check of its first
// sync (cover.go) sees only what was sent within presenceLag, so a message
// sent later would reach the client only at the group's next push or its
// next sync.
const announceWithin = 3 * time.Second

// tryAgainReason is the close reason of a connection whose user could not
// be announced online.
const tryAgainReason = "unavailable: the server could not register this connection; reconnect after a back-off"

// announce writes uid's presence here for a and reports whether it did.
// If it cannot, it closes every connection of uid here (they all relied
// on it) with 1013, so that the clients reconnect, after a back-off, and
// sync.
func (g *Gateway) announce(uid string, a *announcement) bool {
	err := g.writeOnline(uid)
	cut := g.hub.announced(uid, a, err)
	if err != nil {
		g.log.Warn("cannot register presence; closing the user's connections here for them to reconnect", "uid", uid, "conns", len(cut), "err", err)
	}
	for _, c := range cut {
		c.close(websocket.StatusTryAgainLater, tryAgainReason)
		g.metrics.presenceRefused.Add(1)
		g.cfg.Metrics.Refused(refusedPresence)
	}
	return err == nil
}

// writeOnline writes uid's presence on this node, retrying for up to
// announceWithin.
func (g *Gateway) writeOnline(uid string) error {
	ctx, cancel := context.WithTimeout(context.Background(), announceWithin)
	defer cancel()
	publish := g.quietOnline == nil || !g.quietOnline(uid)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		err := g.cfg.Redis.SetOnline(ctx, g.cfg.Node, []string{uid}, g.cfg.PresenceTTL, publish)
		if err == nil {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func (g *Gateway) disconnect(c *conn) {
	if g.hub.remove(c) {
		if g.beforeOffline != nil {
			g.beforeOffline(c.uid)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.nodeMu.RLock() // see releaseNode
		if !g.released {
			if err := g.cfg.Redis.SetOffline(ctx, g.cfg.Node, []string{c.uid}); err != nil {
				g.log.Debug("cannot clear presence; it expires by itself", "uid", c.uid, "err", err)
			}
			// A connection of the user that came meanwhile (a reconnect)
			// set them online, perhaps before the clearing above: set it
			// again, or pushes would miss them until the next refresh.
			// What the fan-out handled in between was not pushed, and the
			// check of the new connection's first sync may have ended
			// before: have it sync again, checked from now.
			if a := g.hub.reannounce(c.uid); a != nil && g.announce(c.uid, a) {
				g.resyncUser(c.uid, protocol.ResyncPresence)
			}
		}
		g.nodeMu.RUnlock()
	}
	g.metrics.conns.Add(-1)
	g.cfg.Metrics.ConnClosed()
}

// presenceRetry is the first wait before a failed write of presence is
// tried again (refreshPresence).
const presenceRetry = time.Second

// refreshPresence keeps every local user's presence entry alive. When
// refreshes failed for as long as an entry lasts, the entries may have
// expired meanwhile: the fan-out took the users for offline and pushed
// them nothing. So it is when the entries were lost (Redis restarted) and
// writing them again failed (deliver). The refresh that comes through then
// announces them (the fan-outs drop what they cached) and tells their
// connections to sync. A failed write is tried again after presenceRetry,
// doubling up to a third of the TTL, the pace of the refreshes.
func (g *Gateway) refreshPresence(ctx context.Context) {
	every := g.cfg.PresenceTTL / 3
	first := min(presenceRetry, every)
	retry := first
	t := time.NewTimer(every)
	defer t.Stop()
	written := time.Now() // the start of the last refresh written: its entries last PresenceTTL from then
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.presenceKick:
			t.Reset(retry) // presence lost and not written again: no waiting for the next refresh
			continue
		case <-t.C:
		}
		start := time.Now()
		uids := g.hub.uids()
		if len(uids) == 0 {
			written = start // nothing to keep alive, nor to tell
			g.presenceLost.Store(false)
			t.Reset(every)
			continue
		}
		lost := g.presenceLost.Swap(false)
		lapsed := lost || start.Sub(written) >= g.cfg.PresenceTTL
		if err := g.cfg.Redis.SetOnline(ctx, g.cfg.Node, uids, g.cfg.PresenceTTL, lapsed); err != nil {
			if lost {
				g.presenceLost.Store(true)
			}
			if ctx.Err() == nil {
				g.log.Warn("presence refresh failed; trying again", "users", len(uids), "err", err, "since", time.Since(written).Round(time.Millisecond), "in", retry)
			}
			t.Reset(retry)
			retry = min(2*retry, every)
			continue
		}
		written, retry = start, first
		t.Reset(every)
		if lapsed {
			g.log.Warn("presence was written again after it had lapsed or been lost; telling this node's connections to sync", "users", len(uids))
			g.askResync(protocol.ResyncPresence)
		}
	}
}

// pingSlots spreads a node's pings over the ping interval: a connection is
// pinged at one of pingSlots ticks of every interval, so that pings, and
// the writer goroutines they start, do not leave all at once.
const pingSlots = 10

// pingConns pings every connection once a PingInterval, until ctx ends:
// one loop for the node rather than a timer for each connection.
func (g *Gateway) pingConns(ctx context.Context) {
	t := time.NewTicker(g.cfg.PingInterval / pingSlots)
	defer t.Stop()
	for slot := 0; ; slot = (slot + 1) % pingSlots {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, c := range g.hub.all() {
			if c.slot == slot {
				c.ping()
			}
		}
	}
}

// deliver hands the pushes published for this node to the connections of
// their recipients, until ctx ends.
func (g *Gateway) deliver(ctx context.Context) error {
	batches, err := g.cfg.Redis.SubscribePushes(ctx, g.cfg.Node)
	if err != nil {
		return err
	}
	g.ready.Store(true)
	defer g.ready.Store(false)
	var lost lostPushes
	defer lost.stop()
	for b := range batches {
		if b.Lost {
			// Pushes this gateway cannot read (a newer fan-out during an
			// upgrade): whoever they were for missed them.
			lost.note(g)
			continue
		}
		if len(b.Items) == 0 {
			// The subscription reconnected: Redis may have restarted and
			// lost presence. Announce every local user again at once, then
			// tell them to sync: pushes published meanwhile are lost, and
			// the next push of a quiet group, whose prev would show the
			// gap, may be long in coming.
			if uids := g.hub.uids(); len(uids) > 0 {
				if err := g.cfg.Redis.SetOnline(ctx, g.cfg.Node, uids, g.cfg.PresenceTTL, true); err != nil {
					// The fan-outs take these users for offline until a
					// write comes through: the next refresh's, which then
					// has them sync (a sync now would come too early, and
					// one storm of pulls is enough).
					g.presenceLost.Store(true)
					select {
					case g.presenceKick <- struct{}{}:
					default:
					}
					g.log.Warn("re-registering presence after a Redis reconnect failed; the refreshes retry it, then have the connections sync", "err", err)
					continue
				}
				g.askResync(protocol.ResyncPushRoute)
			}
			continue
		}
		for c, msgs := range g.perConn(b) {
			c.push(msgs)
		}
	}
	return nil
}

// perConn hands the whole frames of b to their connections and returns
// the messages of b by connection: one queue slot per connection per
// batch, so that a burst is one delivery. A message is decoded once for
// all of its connections whose sync is checked (notePushed), not once for
// each: a node's connections all reconnecting are all checked at once.
func (g *Gateway) perConn(b store.PushBatch) map[*conn][][]byte {
	per := map[*conn][][]byte{}
	for _, it := range b.Items {
		frame := isFrame(it.Msg) // a whole frame (receipts), delivered as is
		var at pushedMsg
		decoded := false
		for _, uid := range it.Uids {
			if g.dropPush != nil && g.dropPush(uid) {
				continue
			}
			if frame {
				g.hub.each(uid, func(c *conn) { c.reply(it.Msg) })
				continue
			}
			g.hub.each(uid, func(c *conn) {
				per[c] = append(per[c], it.Msg)
				if c.coverSince.Load() == 0 {
					return
				}
				if !decoded {
					at, decoded = decodePushed(it.Msg), true
				}
				c.notePushed(at)
			})
		}
	}
	return per
}

// isFrame tells a whole server frame ({"op":...}) from a protocol.Message
// ({"gid":...}) on the push route.
func isFrame(b []byte) bool { return bytes.HasPrefix(b, []byte(`{"op":`)) }
