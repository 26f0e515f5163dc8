package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// group is the client's state of one group. Fields are guarded by c.mu,
// except lock.
type group struct {
	gid    string
	seen   bool // opened, or messages of it were received
	opened bool
	head   int64 // newest msgid the server reported; -1: none

	contig    int64 // every message of the group up to it received; -1: none yet
	delivered int64 // OnMessage returned for every message up to it
	acked     int64 // the server's ack cursor as last confirmed
	unacked   int   // messages delivered since the last ack was sent
	ackDue    time.Time

	read     int64 // the server's read cursor as last confirmed
	readWant int64 // MarkRead's newest upto
	readDue  time.Time

	buf     map[int64]protocol.Message // pushes waiting for their predecessors, up to MaxQueued
	owed    int64                      // the newest push not held for a full buf: a pull brings it; -1: none
	drained int64                      // contig when buf was last drained
	pulling bool                       // a pull holds the group: pushes wait in buf
	later   bool                       // a pull stopped for a full queue: resumed as it drains
	lock    chan struct{}              // one pull of the group at a time

	pullDue bool // a pull is due from the group's puller
	puller  bool // the group's puller runs (pullLaterLocked)

	retaken    int     // retakes in a row (retake.go), until a cursor of the group is accepted
	retakeBo   backoff // the wait before the sync of a retake in a row
	retakeWait bool    // a retake's sync waits
}

func newGroup(gid string, cursor int64) *group {
	return &group{
		gid: gid, head: -1,
		contig: cursor, delivered: cursor, acked: cursor, drained: cursor,
		read: -1, readWant: -1, owed: -1,
		buf:      make(map[int64]protocol.Message),
		lock:     make(chan struct{}, 1),
		retakeBo: backoff{min: retakeMin, max: retakeMax},
	}
}

// Open pulls what is missing of group gid (everything after the client's
// contiguous cursor, page by page) and keeps the group pulled on every
// reconnect. It returns when the messages are queued for OnMessage, not
// when OnMessage has seen them; when more than MaxQueued would be queued,
// when the first of them are, and the rest is pulled as OnMessage takes them.
// A pull the server refuses for a while (unavailable, internal,
// rate_limited) or that times out is made again after a back-off, until
// ctx ends.
func (c *Client) Open(ctx context.Context, gid string) error {
	if err := schema.ValidID(gid); err != nil {
		return fmt.Errorf("client: open: %w", err)
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return ErrClosed
	}
	g := c.groupLocked(gid)
	g.opened, g.seen = true, true
	c.mu.Unlock()
	bo := backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff}
	for {
		s, err := c.waitSession(ctx)
		if err != nil {
			return fmt.Errorf("client: open %s: %w", gid, err)
		}
		err = c.pullGroup(ctx, s, gid)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrDisconnected):
		case mayPass(err): // refused for a while, or timed out
			if err := c.backOff(ctx, bo.next(), err); err != nil {
				return fmt.Errorf("client: open %s: %w", gid, err)
			}
		default:
			var pe *protocol.Error
			if errors.As(err, &pe) && !retryable(pe.Code) {
				// Refused for good (not a member): not pulled again on
				// every reconnect, and forgotten unless a sync names it.
				c.mu.Lock()
				g.opened = false
				if c.groups[gid] == g && !c.named[gid] && g.idle() && !g.puller {
					c.dropLocked(g)
				}
				c.mu.Unlock()
			}
			return fmt.Errorf("client: open %s: %w", gid, err)
		}
	}
}

// pullGroup pulls gid after the contiguous cursor until the server says
// there is no more, or until MaxQueued messages wait for OnMessage: then
// the group is pulled on once half of them are taken (resumePulls). Pushes
// of the group wait in its buffer meanwhile.
func (c *Client) pullGroup(ctx context.Context, s *session, gid string) error {
	c.mu.Lock()
	if s.ended {
		// A later sync may have forgotten gid: it is not made again (at
		// the member's start) for a pull that cannot be made.
		c.mu.Unlock()
		return fmt.Errorf("%w: the connection ended", ErrDisconnected)
	}
	g := c.groupLocked(gid)
	c.mu.Unlock()
	select {
	case g.lock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return s.err
	}
	defer func() { <-g.lock }()
	c.mu.Lock()
	g.pulling = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		g.pulling = false
		c.drainLocked(g)
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		if len(c.queue) >= c.cfg.MaxQueued {
			g.later = true
			c.mu.Unlock()
			return nil
		}
		after := g.contig
		c.stats.Pulls++
		c.mu.Unlock()
		req := protocol.Request{Op: protocol.OpPull, Gid: gid, Limit: c.cfg.PageSize}
		if after >= 0 {
			req.After = &after
		}
		if err := c.frames.wait(ctx); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		f, err := s.request(rctx, req)
		cancel()
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.applyPageLocked(g, f)
		moved := g.contig > after // by the page, or by pushes that overtook it
		c.mu.Unlock()
		if !f.More {
			return nil
		}
		if !moved {
			return fmt.Errorf("client: pull %s after %d: the server said more messages follow but sent none after %d; a server fault: report it (the client tries again later)", gid, after, after)
		}
	}
}

// resumePullsLocked pulls on the groups whose pulls stopped for a full
// queue.
func (c *Client) resumePullsLocked() {
	for _, g := range c.groups {
		if g.later && !c.closing {
			g.later = false
			c.pullLaterLocked(g, false)
		}
	}
}

// pullLaterLocked makes a pull of g due from the group's puller, a
// goroutine started if none runs, which pulls g (after a back-off if
// backOff) and again with back-off while the pulls fail in a way that may
// pass (a refusal with a retryable code: unavailable, internal,
// rate_limited...; a timeout) or leave a gap before buffered pushes open.
// A connection that ends leaves the group to the next connection's resync.
func (c *Client) pullLaterLocked(g *group, backOff bool) {
	g.pullDue = true
	if g.puller || c.closing {
		return
	}
	g.puller = true
	c.wg.Add(1)
	go c.puller(g, backOff)
}

func (c *Client) puller(g *group, backOff bool) {
	defer c.wg.Done()
	bo := backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff}
	for {
		if backOff {
			sleep(c.ctx, bo.next()) // ended early only by Close, which takeDuePull sees
		}
		if !c.takeDuePull(g) {
			return
		}
		s, err := c.waitSession(c.ctx)
		if err == nil {
			err = c.pullGroup(c.ctx, s, g.gid)
		}
		backOff = false
		var pe *protocol.Error
		switch {
		case err == nil:
			// A gap the pull left open (the server's store lags behind its
			// pushes) is pulled again after a back-off. A pull stopped for
			// a full queue is not: resumePulls makes it due as soon as
			// OnMessage has taken half the queue.
			c.mu.Lock()
			if g.later {
				g.pullDue = false
			}
			backOff = g.gap() && !g.later
			c.mu.Unlock()
			if !backOff {
				bo.reset()
			}
		case errors.As(err, &pe) && !retryable(pe.Code):
			c.mu.Lock()
			c.held -= len(g.buf)
			clear(g.buf) // pushes the member may not have; the group is gone for it
			g.owed = -1
			g.pullDue = false
			if c.groups[g.gid] == g && !c.named[g.gid] && g.idle() {
				c.dropLocked(g) // and forgotten, as by a sync not naming it
			}
			c.mu.Unlock()
			c.reportError(fmt.Errorf("client: pull %s: %w", g.gid, err))
		case mayPass(err):
			backOff = true
			c.mu.Lock()
			g.pullDue = true
			c.mu.Unlock()
			c.reportError(fmt.Errorf("client: pull %s: %w; pulling it again after a back-off", g.gid, err))
		case errors.Is(err, ErrDisconnected), errors.Is(err, ErrClosed), errors.Is(err, context.Canceled):
			// The next connection's resync pulls the group, or the client closes.
		}
	}
}

// takeDuePull clears g's due pull and returns true; if none is due, or
// the client closes, it ends g's puller and returns false.
func (c *Client) takeDuePull(g *group) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !g.pullDue || c.closing {
		g.puller = false
		return false
	}
	g.pullDue = false
	return true
}

// mayPass reports whether a pull that failed with err may succeed if tried
// again unchanged on the same connection.
func mayPass(err error) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return retryable(pe.Code)
	}
	return !errors.Is(err, ErrDisconnected) && !errors.Is(err, ErrClosed) && !errors.Is(err, context.Canceled)
}

// applyPageLocked accepts a page's messages past the contiguous cursor. A
// page is a contiguous run of the group's messages after the cursor it was
// asked for. Pushes may have moved the cursor into the run or past it
// meanwhile, but only in order, so what follows the cursor in the page
// follows it in the group.
func (c *Client) applyPageLocked(g *group, f *frame) {
	g.seen = true
	g.head = max(g.head, f.Head)
	for _, m := range f.Msgs {
		if m.Gid == "" {
			m.Gid = g.gid
		}
		switch {
		case m.Gid != g.gid:
			c.log.Warn("chat client: page message of another group dropped", "want", g.gid, "gid", m.Gid)
		case m.MsgID <= g.contig:
			c.stats.Duplicates++
		default:
			c.stats.Pulled++
			c.acceptLocked(g, m)
		}
	}
	c.drainLocked(g)
}
