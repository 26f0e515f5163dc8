package client

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
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

	sends     map[uint64]sendRec // the sends (sendHash) of the newest messages handed to OnMessage
	sendOrder []uint64           // their keys, a ring of at most maxSends
	sendNext  int                // the oldest key in sendOrder once it is full

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

// maxSends bounds the sends a group remembers.
const maxSends = 1000

// sendSeed keys the hashes of sends: a different one in every process, so
// that nothing outside can aim two sends at one hash.
var sendSeed = maphash.MakeSeed()

// sendHash is a send's key: a hash of its sender and client_msg_id. A
// group remembers hashes, not the strings: its memory of sends holds no
// pointer for the collector to follow, and two sends share a hash about
// once in 2^64 tries.
func sendHash(sender, cmid string) uint64 {
	var h maphash.Hash
	h.SetSeed(sendSeed)
	h.WriteString(sender)
	h.WriteByte(0)
	h.WriteString(cmid)
	return h.Sum64()
}

// sendRec is the message that holds a send's key: the last one of its
// sender and client_msg_id in the group that was not a second record.
type sendRec struct{ msgid, sentAt int64 }

// maxSentAt bounds the sent_at two records are compared by: 2^53 ms either
// side of 1970, as the server's (store.ClaimSentAt).
const maxSentAt = 1 << 53

// sameSend reports whether two records of one (gid, sender, client_msg_id),
// sent at a and b (unix ms), are one send under the server's dedup window
// win (ms): their sent_at, clamped to ±2^53 ms, are at most win apart. It
// is the server's rule, store.SameSend, which a test holds it to.
func sameSend(a, b, win int64) bool {
	d := min(max(a, -maxSentAt), maxSentAt) - min(max(b, -maxSentAt), maxSentAt)
	return -win <= d && d <= win
}

// sentBefore reports whether m is a second record of a send already handed
// to OnMessage, and remembers m's send; win is the server's dedup window
// (ms). As the server decides (store.ClaimSends), m is a second record of
// the earlier message that holds its key (same sender and cmid: a resend
// the gateway produced twice, which the fan-out may push) when they are
// one send (sameSend); otherwise m is a new message, the sender's cmid
// used again past the window, and takes the key over. The same message
// again, or an older one (delivered again after a retake), is not a second
// record.
func (g *group) sentBefore(m protocol.Message, win int64) bool {
	if m.Cmid == "" {
		return false
	}
	key := sendHash(m.Sender, m.Cmid)
	if r, ok := g.sends[key]; ok {
		if r.msgid < m.MsgID && sameSend(m.SentAt, r.sentAt, win) {
			return true
		}
		if r.msgid < m.MsgID {
			g.sends[key] = sendRec{m.MsgID, m.SentAt} // keeps its place in the ring
		}
		return false
	}
	if g.sends == nil {
		g.sends = make(map[uint64]sendRec)
	}
	if len(g.sendOrder) < maxSends {
		g.sendOrder = append(g.sendOrder, key)
	} else {
		delete(g.sends, g.sendOrder[g.sendNext])
		g.sendOrder[g.sendNext] = key
		g.sendNext = (g.sendNext + 1) % maxSends
	}
	g.sends[key] = sendRec{m.MsgID, m.SentAt}
	return false
}

// sentBeforeLocked reports whether m is a second record of a send already
// handed to OnMessage (group.sentBefore), and remembers m's send.
func (c *Client) sentBeforeLocked(m protocol.Message) bool {
	return c.groups[m.Gid].sentBefore(m, c.cfg.DedupWindow.Milliseconds())
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
					delete(c.groups, gid)
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
				delete(c.groups, g.gid) // and forgotten, as by a sync not naming it
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
