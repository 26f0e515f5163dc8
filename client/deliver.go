package client

import (
	"errors"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// deliverLoop hands queued messages to OnMessage, one at a time, and counts
// them towards the next ack.
func (c *Client) deliverLoop() {
	defer close(c.deliverDone)
	for {
		select {
		case <-c.stopDeliver:
			return
		case <-c.deliverKick:
		}
		for {
			select {
			case <-c.stopDeliver:
				return
			default:
			}
			c.mu.Lock()
			if len(c.queue) == 0 {
				c.queue = nil
				c.mu.Unlock()
				break
			}
			m := c.queue[0]
			c.queue[0] = protocol.Message{}
			c.queue = c.queue[1:]
			if len(c.queue) == c.cfg.MaxQueued/2 {
				c.resumePullsLocked()
			}
			again := c.sentBeforeLocked(m)
			if again {
				c.stats.Duplicates++
			}
			c.mu.Unlock()

			if c.cfg.OnMessage != nil && !again {
				c.onMessage(m)
			}

			c.mu.Lock()
			c.stats.Delivered++
			g := c.groups[m.Gid]
			g.delivered = m.MsgID
			g.unacked++
			kick := g.unacked >= c.cfg.AckEvery
			if g.ackDue.IsZero() {
				g.ackDue = time.Now().Add(c.cfg.AckInterval)
				kick = true
			}
			if g.readWant > g.read && g.readDue.IsZero() {
				// A read marked past what was delivered then: due now
				// that more is.
				g.readDue = time.Now().Add(c.cfg.AckInterval)
				kick = true
			}
			c.due[g] = true
			c.mu.Unlock()
			if kick {
				c.kickAck()
			}
		}
	}
}

// withoutDisconnects is err less the failures of a connection that ended
// (ErrDisconnected), which the next connection's flush makes good; a
// joined error keeps its other failures.
func withoutDisconnects(err error) error {
	if errs, ok := err.(interface{ Unwrap() []error }); ok {
		var rest []error
		for _, e := range errs.Unwrap() {
			if e = withoutDisconnects(e); e != nil {
				rest = append(rest, e)
			}
		}
		return errors.Join(rest...)
	}
	if errors.Is(err, ErrDisconnected) {
		return nil
	}
	return err
}
