package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/groupchat/chatd/protocol"
)

// applyGroupsLocked records the groups of a sync answer: new groups start
// at the member's ack cursor, known ones take the cursors and heads that
// moved, and groups the answer no longer names are forgotten.
func (c *Client) applyGroupsLocked(groups []protocol.GroupState) {
	c.lastSync = slices.Clone(groups)
	named := make(map[string]bool, len(groups))
	for _, gs := range groups {
		named[gs.Gid] = true
		g := c.groups[gs.Gid]
		if g == nil {
			// First sight of the group: start at the member's ack cursor.
			g = c.remadeLocked(gs.Gid, gs.Ack)
			g.read, g.readWant = gs.Read, gs.Read
		}
		g.acked = max(g.acked, gs.Ack)
		g.read = max(g.read, gs.Read)
		g.readWant = max(g.readWant, g.read) // another device may have read further
		g.head = max(g.head, gs.Head)
	}
	c.forgetLocked(named)
}

// resyncAsked answers the server's resync frame (pushes to this client may
// have been lost): the session syncs again and pulls what the heads show
// missing (syncSoon), not in the read loop's goroutine.
func (s *session) resyncAsked(reason string) {
	if len(reason) > 64 { // the server's words, logged: bounded
		reason = reason[:64] + "..."
	}
	s.c.log.Info("chat client: the server asks for a sync; pushes may have been lost", "reason", reason)
	s.syncSoon()
}

// syncSoon has s sync again and pull what the heads show missing, in a
// goroutine of its own; a sync asked while one runs runs once more after
// it. The caller holds the client's WaitGroup above 0 (the read loop, or
// the run loop while the client is open).
func (s *session) syncSoon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resyncing {
		s.resyncAgain = true
		return
	}
	s.resyncing = true
	s.c.wg.Add(1)
	go func() {
		defer s.c.wg.Done()
		for {
			s.c.syncAgain(s)
			s.mu.Lock()
			again := s.resyncAgain
			s.resyncAgain, s.resyncing = false, again
			s.mu.Unlock()
			if !again {
				return
			}
		}
	}()
}

// syncAgain syncs s, retrying while the server cannot answer yet (its
// memberships are rebuilt after a Redis loss, the usual reason for a
// resync), then pulls as after a reconnect. The sync waits until the
// client's budget of frames holds what the gateway charges for it (a frame,
// and one more per protocol.SyncPer groups its answer lists: as many as the
// last sync listed), and takes the difference once answered: a user in
// 5,000 groups asked to sync again and again synced at once each time, 51
// frames of the gateway's 200 a second, and had its frames refused as
// rate_limited.
func (c *Client) syncAgain(s *session) {
	c.mu.Lock()
	c.stats.Resyncs++
	c.mu.Unlock()
	bo := backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff}
	for {
		c.mu.Lock()
		cost := 1 + protocol.SyncFrames(len(c.lastSync))
		c.mu.Unlock()
		if c.frames.waitN(s.ctx, cost) != nil {
			return // the session ended: the next connection syncs
		}
		ctx, cancel := context.WithTimeout(s.ctx, c.cfg.RequestTimeout)
		f, err := s.request(ctx, protocol.Request{Op: protocol.OpSync})
		cancel()
		if err == nil {
			c.frames.charge(1 + protocol.SyncFrames(len(f.Groups)) - cost)
			c.mu.Lock()
			ended := s.ended
			if !ended {
				c.applyGroupsLocked(f.Groups)
			}
			c.mu.Unlock()
			if !ended {
				c.resync(s)
			}
			return
		}
		c.frames.charge(1 - cost) // a refusal costs its frame only
		if !s.alive() || c.ctx.Err() != nil {
			return // the next connection syncs
		}
		if !mayPass(err) {
			c.reportError(fmt.Errorf("client: sync again: %w", err))
			return
		}
		c.reportError(fmt.Errorf("client: sync again: %w; trying again after a back-off", err))
		if !sleep(s.ctx, bo.next()) {
			return
		}
	}
}

// resync pulls, after a reconnect, every group the client has messages of
// (opened ones among them) whose head moved past its cursor, every group
// with a gap, and every opened group the sync did not name (joined since:
// its head is not known yet). An opened group whose head the sync shows at
// the cursor has nothing to pull: what was stored after the sync's heads
// comes by push (the server checks that the sync covered what it did not
// push, and asks for another sync if not). A user who opened hundreds of
// groups so makes a pull for each group with new messages, not one for
// each group.
//
// The pulls go Config.ResyncPulls at a time (those of every resync of the
// client together), taken in the order of the gids, each within the
// client's budget of frames: one after another, a user with new messages
// in 300 groups waited 300 round trips for the last group, whose pushes
// meanwhile waited behind its gap. A group is pulled by one pull at a time
// (its lock), so its messages are still delivered in order; those of
// different groups interleave, as their pushes do. A pull refused for a
// while (unavailable...) is left to the group's puller. Once the
// connection ends or Close begins no pull is begun, and resync returns
// when those in flight have ended.
func (c *Client) resync(s *session) {
	c.mu.Lock()
	var gids []string
	for gid, g := range c.groups {
		if g.opened && !c.named[gid] || g.gap() || g.seen && g.head > g.contig {
			gids = append(gids, gid)
		}
	}
	c.mu.Unlock()
	slices.Sort(gids)
	var next atomic.Int64 // the index in gids of the next group to pull
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range min(c.cfg.ResyncPulls, len(gids)) {
		wg.Go(func() {
			for !stop.Load() && !c.isClosing() {
				i := next.Add(1) - 1
				if i >= int64(len(gids)) {
					return
				}
				if !c.resyncGroup(s, gids[i]) {
					stop.Store(true)
				}
			}
		})
	}
	wg.Wait()
}

// resyncGroup pulls gid for resync, in a slot of c.resyncPulls (a resync
// frame right after a reconnect has two resyncs run at once). It returns
// false when the connection has ended or the client closes: the next
// connection resyncs.
func (c *Client) resyncGroup(s *session, gid string) bool {
	select {
	case c.resyncPulls <- struct{}{}:
	case <-s.done:
		return false
	case <-c.ctx.Done():
		return false
	}
	err := c.pullGroup(c.ctx, s, gid)
	<-c.resyncPulls
	switch {
	case err == nil:
	case !s.alive() || c.ctx.Err() != nil:
		return false
	case mayPass(err):
		c.reportError(fmt.Errorf("client: resync %s: %w; pulling it again after a back-off", gid, err))
		c.mu.Lock()
		if g := c.groups[gid]; g != nil { // not forgotten by a later sync
			c.pullLaterLocked(g, true)
		}
		c.mu.Unlock()
	default:
		c.reportError(fmt.Errorf("client: resync %s: %w", gid, err))
	}
	return true
}
