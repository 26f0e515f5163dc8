package client

import (
	"maps"
	"slices"
	"strconv"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// The push path: pushes taken in order by their prev, held behind a gap,
// or owed to a pull when memory should hold no more.

// pushBudget bounds the pushes that wait in memory, each of: those queued
// for OnMessage, those held behind gaps in all groups together, and those
// that came before a session's sync answer. Pushes past it are not kept;
// the groups' pulls bring them (a pull stops while MaxQueued wait). Pushes
// come at the pace of the conversation, but a server may push faster than
// OnMessage takes them, or flood.
func (c *Client) pushBudget() int { return 2 * c.cfg.MaxQueued }

// onPush handles a push frame. Pushes that arrive before the session's sync
// answer wait for it: the cursors come from the sync.
func (c *Client) onPush(s *session, msgs []protocol.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.synced {
		for _, m := range msgs {
			if len(s.early) < c.pushBudget() {
				s.early = append(s.early, m)
			} else if id, ok := s.earlyOwed[m.Gid]; ok && m.MsgID > id || !ok && len(s.earlyOwed) < c.pushBudget() {
				// More than memory should hold before the sync: pulled
				// after it (see applySync). Past as many groups again,
				// a flood: their pushes are dropped, and their next
				// push or sync brings them.
				if s.earlyOwed == nil {
					s.earlyOwed = map[string]int64{}
				}
				s.earlyOwed[m.Gid] = m.MsgID
			}
		}
		return
	}
	for _, m := range msgs {
		c.pushLocked(m)
	}
}

func (c *Client) pushLocked(m protocol.Message) {
	if schema.ValidID(m.Gid) != nil {
		c.log.Warn("chat client: push without a valid gid dropped", "gid", m.Gid, "msgid", m.MsgID)
		return
	}
	c.stats.Pushes++
	if c.groups[m.Gid] == nil && c.unnamedLocked() >= MaxUnnamedGroups {
		c.stats.UnnamedDrops++
		if !c.dropWarned {
			c.dropWarned = true
			c.log.Warn("chat client: pushes of groups no sync named dropped; the client keeps as many such groups as it may until the next sync",
				"gid", m.Gid, "groups", c.unnamedLocked())
		}
		return
	}
	g := c.groupLocked(m.Gid)
	g.seen = true
	if _, ok := g.buf[m.MsgID]; ok || m.MsgID <= g.contig {
		c.stats.Duplicates++
		return
	}
	if m.Prev != nil && *m.Prev == g.contig {
		if len(c.queue) < c.pushBudget() {
			c.acceptLocked(g, m)
		} else {
			g.owed = max(g.owed, m.MsgID) // OnMessage is far behind: pulled once it catches up
		}
		c.drainLocked(g)
		return
	}
	if c.sends.secondRecord(m, c.cfg.DedupWindow.Milliseconds()) {
		// A second record of a send handed over already (a resend the
		// server wrote twice), after a gap: never handed over, it is not
		// held either, for the server stores only the first, and a pull
		// would never bring the records before it up to it. Its prev,
		// when it names one, is still owed.
		c.stats.Duplicates++
		if m.Prev != nil && *m.Prev > g.contig {
			g.owed = max(g.owed, *m.Prev)
			c.drainLocked(g)
		}
		return
	}
	if !g.pulling {
		c.stats.Gaps++
		prev := "unknown"
		if m.Prev != nil {
			prev = strconv.FormatInt(*m.Prev, 10)
		}
		c.log.Debug("chat client: gap", "gid", m.Gid, "msgid", m.MsgID, "prev", prev, "contig", g.contig)
	}
	if len(g.buf) < c.heldLocked(g) && c.held < c.pushBudget() {
		g.buf[m.MsgID] = m
		c.held++
	} else {
		g.owed = max(g.owed, m.MsgID) // held, a gap this long would fill memory
	}
	c.drainLocked(g)
}

// gap reports whether pushes of g wait for their predecessors: held in
// buf, or not held (owed) and to be pulled.
func (g *group) gap() bool { return len(g.buf) > 0 || g.owed > g.contig }

// acceptLocked moves the contiguous cursor to m and queues m for OnMessage.
func (c *Client) acceptLocked(g *group, m protocol.Message) {
	g.contig = m.MsgID
	c.queue = append(c.queue, m)
	select {
	case c.deliverKick <- struct{}{}:
	default:
	}
}

// drainLocked accepts the buffered pushes that now follow the contiguous
// cursor and drops those it passed. If a gap remains and no pull holds the
// group, it makes a pull of the group due.
func (c *Client) drainLocked(g *group) {
	// Only once the cursor moved, and in msgid order, where a chain of
	// pushes ascends, so one pass takes it: a long gap buffers many pushes,
	// and a scan of them all per push, or per message of the chain, would
	// hold the client's lock for seconds.
	if g.contig != g.drained {
		for _, id := range slices.Sorted(maps.Keys(g.buf)) {
			if m := g.buf[id]; id > g.contig && m.Prev != nil && *m.Prev == g.contig {
				delete(g.buf, id)
				c.held--
				c.acceptLocked(g, m)
			}
		}
		for id := range g.buf {
			if id <= g.contig {
				delete(g.buf, id)
				c.held--
				c.stats.Duplicates++
			}
		}
		g.drained = g.contig
	}
	if g.gap() && !g.pulling && !c.closing {
		c.pullLaterLocked(g, false) // the gap
	}
}
