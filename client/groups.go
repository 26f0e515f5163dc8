package client

import "slices"

// Which groups the client keeps: those the last sync named, and a bounded
// number of others (pushed since: joined meanwhile, or a server fault).

// The groups no sync named (pushed since the last sync: joined since, or a
// server fault) are bounded, so that a server pushing new gids on one long
// connection cannot grow the client until the next sync.
const (
	// MaxUnnamedGroups is the most groups no sync named the client keeps; a
	// push of one more is dropped. The sync that names the group shows its
	// head, and opening it (or its next push's gap) pulls the messages.
	MaxUnnamedGroups = 1000
	// MaxUnnamedHeld is the most pushes held behind a gap in a group no
	// sync named (at most MaxQueued); the others are dropped and pulled.
	MaxUnnamedHeld = 10
	// maxForgotten is the most forgotten groups whose cursors the client
	// remembers (about 50 bytes each): one pushed, pulled or named again
	// starts from there, not from what the server says, which may be
	// behind (a sync cut short by a rebuild of the server's state).
	maxForgotten = 10000
)

// groupLocked returns gid's state, creating it for a group the last sync did
// not list (joined since): its messages are pulled from the member's start.
func (c *Client) groupLocked(gid string) *group {
	g := c.groups[gid]
	if g == nil {
		g = c.remadeLocked(gid, -1)
	}
	return g
}

// remadeLocked makes gid's state again, from cursor or, for a group the
// client forgot, from where it was, whichever is further: the messages up
// to it were handed to OnMessage, and never are twice.
func (c *Client) remadeLocked(gid string, cursor int64) *group {
	if f, ok := c.forgotten[gid]; ok {
		cursor = max(cursor, f.delivered)
		delete(c.forgotten, gid)
	}
	g := newGroup(gid, cursor)
	c.groups[gid] = g
	return g
}

// forgot is how far a forgotten group was delivered, and when it was
// forgotten (a count of the client's forgettings).
type forgot struct {
	delivered int64
	seq       uint64
}

// dropLocked forgets g, remembering how far it was delivered, for the last
// maxForgotten groups forgotten (the oldest forgotten whole: a server
// naming new groups on every reconnect must not grow the client without
// bound).
func (c *Client) dropLocked(g *group) {
	delete(c.groups, g.gid)
	if c.forgotten == nil {
		c.forgotten = map[string]forgot{}
	}
	c.forgetSeq++
	c.forgotten[g.gid] = forgot{g.delivered, c.forgetSeq}
	c.forgotOrder = append(c.forgotOrder, forgotAt{g.gid, c.forgetSeq})
	for len(c.forgotten) > maxForgotten {
		oldest := c.forgotOrder[0]
		c.forgotOrder = c.forgotOrder[1:]
		if f, ok := c.forgotten[oldest.gid]; ok && f.seq == oldest.seq {
			delete(c.forgotten, oldest.gid)
		}
	}
	if len(c.forgotOrder) > 2*maxForgotten { // mostly gids taken up again, or forgotten again since
		c.forgotOrder = slices.DeleteFunc(c.forgotOrder, func(o forgotAt) bool {
			f, ok := c.forgotten[o.gid]
			return !ok || f.seq != o.seq
		})
	}
}

// forgotAt is an entry of the order in which groups were forgotten: the
// remembered one of gid if its seq is still seq.
type forgotAt struct {
	gid string
	seq uint64
}

// unnamedLocked is the number of groups the last sync did not name: every
// named group has a state, and none is dropped while named.
func (c *Client) unnamedLocked() int { return len(c.groups) - len(c.named) }

// heldLocked is the most pushes g holds behind a gap.
func (c *Client) heldLocked(g *group) int {
	if !c.named[g.gid] {
		return min(c.cfg.MaxQueued, MaxUnnamedHeld)
	}
	return c.cfg.MaxQueued
}

// forgetLocked drops the groups a sync did not name (the user is not a
// member: never was, or the server forgot) of which nothing waits: not
// opened, every message received handed to OnMessage and its ack confirmed,
// no read to send, no push buffered, no pull. A server naming new groups on
// every reconnect would otherwise grow the client without bound. Nothing
// is delivered twice: a group named or pushed again starts where it was
// (dropLocked), or at the server's ack cursor if that is further.
func (c *Client) forgetLocked(named map[string]bool) {
	c.named, c.dropWarned = named, false
	for gid, g := range c.groups {
		if !named[gid] && g.idle() && !g.puller {
			c.dropLocked(g)
		}
	}
}

// idle reports whether nothing of g waits but its puller, if it runs: g
// may be forgotten.
func (g *group) idle() bool {
	return !g.opened && g.contig == g.delivered && g.delivered <= g.acked && g.readWant <= g.read &&
		!g.gap() && !g.pulling && !g.later && !g.pullDue && len(g.lock) == 0
}
