package client

import (
	"context"
	"errors"
	"fmt"
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
			again := c.groups[m.Gid].sentBefore(m)
			if again {
				c.stats.Duplicates++
			}
			c.mu.Unlock()

			if c.cfg.OnMessage != nil && !again {
				c.cfg.OnMessage(m)
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

func (c *Client) kickAck() {
	select {
	case c.ackKick <- struct{}{}:
	default:
	}
}

// ackLoop sends the acks and reads that are due, until Close.
func (c *Client) ackLoop() {
	defer close(c.ackerDone)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		if err := withoutDisconnects(c.flush(c.ackCtx, false)); err != nil && c.ackCtx.Err() == nil {
			c.reportError(err)
		}
		t.Reset(c.nextDue())
		select {
		case <-c.ackCtx.Done():
			return
		case <-c.ackKick:
		case <-t.C:
		}
	}
}

// nextDue is how long until the earliest pending ack or read is due.
func (c *Client) nextDue() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := time.Hour
	now := time.Now()
	for _, g := range c.groups {
		for _, due := range []time.Time{g.ackDue, g.readDue} {
			if !due.IsZero() {
				next = min(next, max(due.Sub(now), time.Millisecond))
			}
		}
	}
	return next
}

type cursorUpdate struct {
	g    *group
	op   string // protocol.OpAck or OpRead
	upto int64
	ans  chan *frame
}

// settle records u as sent: its cursor owes nothing up to u.upto. c.mu
// must be held.
func (u cursorUpdate) settle() {
	if u.op == protocol.OpAck {
		u.g.acked = max(u.g.acked, u.upto)
	} else {
		u.g.read = max(u.g.read, u.upto)
	}
}

// flush sends the acks (then the reads) that are due, or all pending ones
// if all, and waits for their answers. Only one flush runs at a time: the
// ack loop's, or Close's after the loop ended.
func (c *Client) flush(ctx context.Context, all bool) error {
	var acks, reads []cursorUpdate
	now := time.Now()
	c.mu.Lock()
	s := c.sess
	for _, g := range c.groups {
		if g.delivered > g.acked && (all || g.unacked >= c.cfg.AckEvery || !g.ackDue.IsZero() && !now.Before(g.ackDue)) {
			acks = append(acks, cursorUpdate{g: g, op: protocol.OpAck, upto: g.delivered})
			g.unacked, g.ackDue = 0, time.Time{}
		} else if g.delivered <= g.acked {
			g.unacked, g.ackDue = 0, time.Time{}
		}
		// Never read past what was delivered: the rest waits for
		// deliverLoop to hand it over, which makes the read due again.
		if all || !g.readDue.IsZero() && !now.Before(g.readDue) {
			if upto := min(g.readWant, g.delivered); upto > g.read {
				reads = append(reads, cursorUpdate{g: g, op: protocol.OpRead, upto: upto})
			}
			g.readDue = time.Time{}
		}
	}
	c.mu.Unlock()
	if len(acks) == 0 && len(reads) == 0 {
		return nil
	}
	if s == nil {
		c.retryLater(append(acks, reads...))
		return fmt.Errorf("client: flush acks: %w: not connected", ErrDisconnected)
	}
	// Acks before reads: a server may refuse a read past the ack cursor.
	err := c.sendCursors(ctx, s, acks)
	return errors.Join(err, c.sendCursors(ctx, s, reads))
}

// sendCursors writes every update, then waits for every answer.
func (c *Client) sendCursors(ctx context.Context, s *session, ups []cursorUpdate) error {
	if len(ups) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	// Counted before they are written: a server may answer at once.
	c.mu.Lock()
	for _, u := range ups {
		if u.op == protocol.OpAck {
			c.stats.Acks++
		} else {
			c.stats.Reads++
		}
	}
	c.mu.Unlock()
	errs := make([]error, len(ups))
	done := make(chan int, len(ups))
	for i := range ups {
		go func() {
			u := ups[i]
			_, errs[i] = s.request(ctx, protocol.Request{Op: u.op, Gid: u.g.gid, Upto: &u.upto})
			done <- i
		}()
	}
	var failed []cursorUpdate
	var all []error
	for range ups {
		i := <-done
		u := ups[i]
		if err := errs[i]; err != nil {
			var pe *protocol.Error
			var how string
			if u.op == protocol.OpAck && errors.As(err, &pe) && pe.Code == protocol.CodeBeyondHead {
				how = c.retake(s, u.g, u.upto)
			}
			switch {
			case how != "":
				err = fmt.Errorf("%w; %s", err, how)
			case !errors.As(err, &pe) || retryable(pe.Code) || pe.Code == protocol.CodeBeyondHead:
				failed = append(failed, u) // else left to the next delivery or MarkRead
			default:
				// Refused for good (not a member): reported once, and not
				// owed, or the group would never be idle and forgotten, and
				// every Close would report it again.
				c.mu.Lock()
				u.settle()
				c.mu.Unlock()
			}
			all = append(all, fmt.Errorf("client: %s %s upto %d: %w", u.op, u.g.gid, u.upto, err))
			continue
		}
		c.mu.Lock()
		u.g.retakeEnded()
		u.settle()
		c.mu.Unlock()
	}
	c.retryLater(failed)
	return errors.Join(all...)
}

// retryLater makes failed updates due again after AckInterval. A refused ack
// (beyond_head: the server's view lags its pushes) is retried the same way.
func (c *Client) retryLater(ups []cursorUpdate) {
	if len(ups) == 0 {
		return
	}
	due := time.Now().Add(c.cfg.AckInterval)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, u := range ups {
		if u.op == protocol.OpAck {
			if u.g.ackDue.IsZero() {
				u.g.ackDue = due
			}
		} else if u.g.readDue.IsZero() {
			u.g.readDue = due
		}
	}
}

// MarkRead records that the user has read group gid up to msgid upto. Reads
// are batched like acks and sent only up to what OnMessage was handed.
// upto past the client's contiguous cursor is refused with ErrNotReceived.
func (c *Client) MarkRead(ctx context.Context, gid string, upto int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return ErrClosed
	}
	g := c.groups[gid]
	if g == nil || upto > g.contig {
		return fmt.Errorf("client: mark read %s upto %d: %w", gid, upto, ErrNotReceived)
	}
	if upto <= g.readWant {
		return nil
	}
	g.readWant = upto
	if g.readDue.IsZero() {
		g.readDue = time.Now().Add(c.cfg.AckInterval)
		select {
		case c.ackKick <- struct{}{}:
		default:
		}
	}
	return nil
}
