package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// A connection gets the pushes of the messages the fan-out handles once it
// sees the user online here. The ones it handled before (the moment the
// connection registered, or its push route came back after a break) reach
// the client only through a sync's heads, which the persister writes: when
// it lags, as while ClickHouse is down, a sync misses them, and in a quiet
// group nothing shows the client the gap.
//
// So the first sync after such a moment is checked: every message the
// fan-out may have handled before it saw the user online lies below the
// log's ends read presenceLag after the moment, and the sync covered them
// if the persister had stored them all before the sync read the heads. If
// not, the gateway waits until the persister has, and sends a resync frame
// if one of them is in a group the sync answered for, above the head it
// gave and below the first message of that group pushed to the connection
// since the moment. A group the sync did not list, which the user is a
// member of when the ends are read (joined meanwhile), counts as answered
// with its join position. After the check, later syncs need none until the
// next such moment.

// coverPoll is how often the persister's position is read while a
// connection waits for it (one read for all of this node's connections).
const coverPoll = 100 * time.Millisecond

// endsGap is the least time between two reads of the log's ends, or of
// the persister's position: a node's connections all reconnecting share a
// few reads a second, not one each.
const endsGap = 50 * time.Millisecond

// coverReads are the reads the checks make.
type coverReads struct {
	ends   func(context.Context) (map[int]int64, error) // the log's ends, by partition
	stored func(context.Context) (map[int]int64, error) // the persister's position, by partition
}

func newCoverReads(cfg Config) coverReads {
	return coverReads{ends: cfg.Producer.MessageEnds, stored: func(ctx context.Context) (map[int]int64, error) {
		return cfg.Redis.Offsets(ctx, consumers.GroupPersister, topics.Messages)
	}}
}

// behind is a group of a sync answered before the persister had stored
// the messages below its partition's end.
type behind struct {
	gid  string
	head int64 // the sync's
	part int
	end  int64
}

// presenceLag is how long after a connection registered the fan-out may
// still take its user for offline (a cached lookup, its announcement
// missed), and so neither push nor show a message to the check: the check
// reads the log's ends no sooner.
const presenceLag = consumers.DefaultPresenceTTL

// coverFrom marks that the sync of c must cover the messages the fan-out
// handled before now.
func (c *conn) coverFrom(now time.Duration) {
	c.pushedMu.Lock()
	c.pushed = nil // from the moment on
	c.pushedMu.Unlock()
	c.coverSince.Store(int64(now))
}

// pushedMsg is what notePushed keeps of a pushed message.
type pushedMsg struct {
	Gid   string `json:"gid"`
	MsgID int64  `json:"msgid"`
}

// decodePushed returns the group and msgid of a pushed message, a zero
// Gid if it does not decode.
func decodePushed(msg []byte) pushedMsg {
	var m pushedMsg
	if json.Unmarshal(msg, &m) != nil {
		return pushedMsg{}
	}
	return m
}

// notePushed remembers, while a sync of c is to be checked, the lowest
// msgid of each group pushed to c: the fan-out pushes a group's messages
// in order, so once one reached c the later ones did too, and the check
// need not ask c to sync for them.
func (c *conn) notePushed(m pushedMsg) {
	if m.Gid == "" {
		return
	}
	c.pushedMu.Lock()
	defer c.pushedMu.Unlock()
	if c.coverSince.Load() == 0 { // under the lock: endCover may be letting the map go
		return
	}
	if c.pushed == nil {
		c.pushed = map[string]int64{}
	}
	if low, ok := c.pushed[m.Gid]; !ok || m.MsgID < low {
		c.pushed[m.Gid] = m.MsgID
	}
}

// endCover ends the check of the moment since, unless a later one has
// begun, and lets go of what it noted pushed: a connection lives on long
// after its check, mostly idle.
func (c *conn) endCover(since int64) {
	if c.coverSince.CompareAndSwap(since, 0) {
		c.pushedMu.Lock()
		if c.coverSince.Load() == 0 { // else a new moment's, which coverFrom began afresh
			c.pushed = nil
		}
		c.pushedMu.Unlock()
	}
}

// pushedFrom returns the lowest msgid of gid pushed to c since the moment
// its check covers, or ok false if none was.
func (c *conn) pushedFrom(gid string) (low int64, ok bool) {
	c.pushedMu.Lock()
	defer c.pushedMu.Unlock()
	low, ok = c.pushed[gid]
	return low, ok
}

// syncCovered answers a sync, checking it when it must cover a moment
// (see above). The check runs after the answer, so that a sync waits for
// no more than one extra read (the persister's position); the log's ends
// it reads then are later than the heads, and the messages that came in
// between and were pushed need no resync.
func (c *conn) syncCovered(ctx context.Context, r *protocol.Request) (any, *protocol.Error) {
	g := c.g
	since := c.coverSince.Load()
	if since == 0 {
		return g.do(ctx, c.uid, r)
	}
	// Read before the heads: what it says stored, the heads hold. A read
	// shared with the syncs of the last endsGap is as good (an older
	// position only checks more groups). Unread, it is taken as nothing
	// stored: every group whose partition holds a message is then checked.
	stored, err := g.storedRead.after(ctx, g.since()-endsGap, g.since, g.reads.stored)
	if err != nil {
		g.log.Warn("cannot read the persister's position; checking every group of a sync", "err", err)
		stored = map[int]int64{}
	}
	ans, perr := g.do(ctx, c.uid, r)
	if perr != nil {
		return ans, perr
	}
	var heads []behind
	for _, gs := range ans.(*protocol.Synced).Groups {
		if !gs.Left {
			heads = append(heads, behind{gid: gs.Gid, head: gs.Head})
		}
	}
	// A timer, not a goroutine waiting presenceLag: a node's connections
	// all reconnecting would hold a stack each for that long.
	time.AfterFunc(time.Duration(since)+g.presenceLag-g.since(), func() {
		if c.ctx.Err() == nil {
			g.checkCover(c, since, stored, heads)
		}
	})
	return ans, nil
}

// checkCover checks a sync of c answered with heads, when the persister's
// position was stored (see syncCovered).
func (g *Gateway) checkCover(c *conn, since int64, stored map[int]int64, heads []behind) {
	var ends map[int]int64
	var groups map[string]store.Membership
	for attempt := 0; ; attempt++ {
		var err error
		if ends, err = g.ends.after(c.ctx, time.Duration(since)+g.presenceLag, g.since, g.reads.ends); err == nil {
			if groups, err = g.cfg.Redis.UserGroups(c.ctx, c.uid); err == nil {
				break
			}
		}
		if c.ctx.Err() != nil || c.coverSince.Load() != since {
			return // closed, or another sync covered it or has its own moment
		}
		if attempt == 0 {
			g.log.Warn("cannot read the log's ends or the user's groups to check a sync; retrying", "uid", c.uid, "err", err)
		}
		select {
		case <-time.After(min(endsGap<<min(attempt, 6), 2*time.Second)):
		case <-c.ctx.Done():
			return
		}
	}
	late := heads[:0]
	listed := make(map[string]bool, len(heads))
	for _, b := range heads {
		listed[b.gid] = true
		b.part = topics.Partition(b.gid, len(ends))
		if b.end = ends[b.part]; lacks(stored, b.part, b.end) {
			late = append(late, b)
		}
	}
	// A group the user joined after the sync read his groups (or that it
	// did not list yet) was answered for with nothing: the client knows
	// of none of its messages, which the fan-out did not push while it
	// took him for offline.
	for gid, m := range groups {
		if m.State != store.MemberJoined || listed[gid] {
			continue
		}
		b := behind{gid: gid, head: m.JoinedAt, part: topics.Partition(gid, len(ends))}
		if b.end = ends[b.part]; b.end > b.head+1 {
			late = append(late, b)
		}
	}
	if len(late) == 0 {
		c.endCover(since)
	} else if c.coverWatch.Swap(since) != since {
		g.watchCover(c, since, late)
	}
}

// watchCover waits until the persister has stored what late lacks, then
// tells c to sync again if the sync it answered missed a message.
func (g *Gateway) watchCover(c *conn, since int64, late []behind) {
	caughtUp := func(stored map[int]int64) bool {
		if c.coverSince.Load() != since {
			return true // another sync covered it, or has its own moment
		}
		for _, b := range late {
			if lacks(stored, b.part, b.end) {
				return false
			}
		}
		return true
	}
	if g.stored.wait(c.ctx, g, caughtUp) != nil || c.coverSince.Load() != since {
		return // closed, or another sync covered it or has its own moment
	}
	missed, err := g.missedBelow(c, late)
	if err != nil {
		g.log.Warn("cannot tell whether a sync missed messages; asking the client to sync again", "uid", c.uid, "err", err)
		missed = true
	}
	if missed {
		c.reply(resyncFrame(protocol.ResyncLateStore))
		g.resynced(protocol.ResyncLateStore, 1)
	}
	// The check ends either way, after its resync is queued and counted:
	// what c is sent once the check has ended comes after the resync. The
	// sync a resync asks for reads the heads after the store caught up,
	// and covers the moment; one that began meanwhile has a moment of its
	// own, which endCover leaves alone.
	c.endCover(since)
}

// lacks reports whether the persister's position stored has not reached
// end in partition part. A partition it claimed from the start and has not
// read yet is saved as kafka.FirstOffset (-2): it has stored nothing there,
// which covers an empty partition (end 0).
func lacks(stored map[int]int64, part int, end int64) bool {
	return max(stored[part], 0) < end
}

// missedBelow reports whether a group of late has a message above the
// head its sync gave, below its partition's end and below the first
// message pushed to c.
func (g *Gateway) missedBelow(c *conn, late []behind) (bool, error) {
	ctx := c.ctx
	gids := make([]string, len(late))
	for i, b := range late {
		gids[i] = b.gid
	}
	heads, err := g.cfg.Redis.Heads(ctx, gids)
	if err != nil {
		return false, err
	}
	for _, b := range late {
		if heads[b.gid] <= b.head {
			continue
		}
		w, err := g.cfg.Redis.Window(ctx, b.gid, b.head, 1, 0)
		if err != nil {
			return false, err
		}
		below := b.end
		if low, ok := c.pushedFrom(b.gid); ok {
			below = min(below, low)
		}
		if w.Floor > b.head || len(w.Messages) > 0 && w.Messages[0].MsgID < below {
			return true, nil
		}
	}
	return false, nil
}

// sharedRead reads for the syncs that need it (the log's ends, the
// persister's position), sharing one read among all that need it read
// after the same moment: a node's connections all reconnecting cost a few
// reads, not one each.
type sharedRead struct {
	mu   sync.Mutex
	cur  *sharedFetch  // in flight
	next *sharedFetch  // for those who came after cur began: starts when it ends
	last *sharedFetch  // the newest that succeeded
	read time.Duration // when the newest read, failed or not, began
}

type sharedFetch struct {
	began time.Duration // since the gateway's start
	done  chan struct{}
	ends  map[int]int64
	err   error
}

// after returns ends read by a fetch that began after moment t (as
// measured by now).
func (f *sharedRead) after(ctx context.Context, t time.Duration, now func() time.Duration, fetch func(context.Context) (map[int]int64, error)) (map[int]int64, error) {
	f.mu.Lock()
	var x *sharedFetch
	switch {
	case f.last != nil && f.last.began >= t:
		x = f.last
	case f.cur != nil && f.cur.began >= t:
		x = f.cur
	case f.cur != nil:
		if f.next == nil {
			f.next = &sharedFetch{done: make(chan struct{})}
		}
		x = f.next
	default:
		x = &sharedFetch{done: make(chan struct{})}
		f.cur = x
		x.began = now()
		go f.run(x, now, fetch)
	}
	f.mu.Unlock()
	select {
	case <-x.done:
		return x.ends, x.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *sharedRead) run(x *sharedFetch, now func() time.Duration, fetch func(context.Context) (map[int]int64, error)) {
	// One read every endsGap at most, failed ones too (the checks of a
	// node's connections retry them while the broker is down): a sync's
	// check waits, its answer does not. x.began stays when it was due,
	// before the read: ends read later still hold every message sent
	// before.
	f.mu.Lock()
	var wait time.Duration
	if f.read != 0 {
		wait = f.read + endsGap - now()
	}
	f.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait)
	}
	f.mu.Lock()
	f.read = now()
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	x.ends, x.err = fetch(ctx)
	cancel()
	close(x.done)
	f.mu.Lock()
	defer f.mu.Unlock()
	if x.err == nil {
		f.last = x
	}
	f.cur, f.next = f.next, nil
	if f.cur != nil {
		f.cur.began = now()
		go f.run(f.cur, now, fetch)
	}
}

// storedWatch reads the persister's position every coverPoll while
// connections wait for it.
type storedWatch struct {
	mu      sync.Mutex
	waiters int
	polling bool          // poll runs
	stored  map[int]int64 // the last read, nil before the first
	changed chan struct{} // closed at the next read
}

// wait returns when ok holds for the persister's position, or ctx ends.
func (w *storedWatch) wait(ctx context.Context, g *Gateway, ok func(map[int]int64) bool) error {
	w.mu.Lock()
	w.waiters++
	if !w.polling {
		w.polling, w.stored, w.changed = true, nil, make(chan struct{})
		go w.poll(g)
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.waiters--
		w.mu.Unlock()
	}()
	for {
		w.mu.Lock()
		stored, changed := w.stored, w.changed
		w.mu.Unlock()
		if stored != nil && ok(stored) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// poll reads the position until nobody waits.
func (w *storedWatch) poll(g *Gateway) {
	t := time.NewTicker(coverPoll)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), coverPoll)
		stored, err := g.reads.stored(ctx)
		cancel()
		w.mu.Lock()
		if err == nil {
			w.stored = stored
			close(w.changed)
			w.changed = make(chan struct{})
		}
		if w.waiters == 0 {
			w.polling = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		<-t.C
	}
}
