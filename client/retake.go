package client

import (
	"fmt"
	"time"
)

const (
	retakeMin = time.Second // a group taken up again twice in a row waits this before its sync and pull,
	retakeMax = time.Minute // twice that at each further time, up to this
)

// retake handles an ack of g up to upto refused as beyond_head: the
// server has no such message in g (a gateway checks an ack above its
// store's head against the log itself, so a message it pushed passes). A
// push of a msgid the group does not have, whose prev matched, was taken:
// nothing tells it from a real one, and kept, it would have the client
// drop the group's later messages as older, and the server refuse its
// acks, for the client's whole life. retake takes g up again from the ack
// cursor the server confirmed, as a new Client would, and has s sync and
// pull what the heads show missing; it returns what it did, for the
// refusal's report. With a message of g still on its way to OnMessage, or
// a pull of g running, it returns "" and the ack is sent again later (and
// refused again, then taken up). The messages delivered since that cursor
// may be delivered again; none is lost, as nothing was acked past it.
//
// A server that pushes that msgid again has g taken up again and again:
// from the second time in a row the sync waits, retakeMin doubling up to
// retakeMax, with jitter, and the report says so once, until a cursor of g
// is accepted (retakeEnded). Without the wait such a server had the client
// sync all its groups about once an AckInterval for ever.
func (c *Client) retake(s *session, g *group, upto int64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if upto > g.contig {
		return "the group is taken up again already"
	}
	if g.contig != g.delivered || g.pulling || c.closing {
		return ""
	}
	g.contig, g.delivered, g.drained = g.acked, g.acked, g.acked
	g.head = g.acked                                   // the sync says the server's; a page may have raised it
	g.readWant = max(g.read, min(g.readWant, g.acked)) // marked read past a message that is not
	g.unacked, g.ackDue = 0, time.Time{}
	c.held -= len(g.buf)
	clear(g.buf)
	g.owed = -1
	c.stats.Retakes++
	const how = "taking the group up again from the ack cursor"
	switch {
	case g.retaken == 0:
		g.retaken = 1
		c.log.Warn("chat client: an ack refused as beyond the group's head; taking the group up again", "gid", g.gid, "upto", upto, "acked", g.acked)
		s.syncSoon()
		return how
	case g.retakeWait:
		return how + "; its sync waits already"
	}
	g.retaken++
	d := g.retakeBo.next()
	c.stats.RetakesWaited++
	g.retakeWait = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		synced := sleep(s.ctx, d) // ended early with the connection: the next one syncs
		c.mu.Lock()
		g.retakeWait = false
		c.mu.Unlock()
		if synced {
			s.syncSoon()
		}
	}()
	c.log.Debug("chat client: an ack refused as beyond the group's head again; taking the group up again after a wait", "gid", g.gid, "upto", upto, "acked", g.acked, "wait", d)
	if g.retaken == 2 {
		return fmt.Sprintf("%s, syncing after %v: the server keeps sending messages of the group it then refuses as beyond its head; syncing for it less often, up to once every %v, until a cursor of it is accepted",
			how, d.Round(time.Millisecond), retakeMax)
	}
	return fmt.Sprintf("%s, syncing after %v", how, d.Round(time.Millisecond))
}

// retakeEnded records that the server accepted a cursor of g: its next
// retake syncs at once.
func (g *group) retakeEnded() {
	g.retaken = 0
	g.retakeBo.reset()
}
