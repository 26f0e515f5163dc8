package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/groupchat/chatd/protocol"
)

func (c *Client) kickAck() {
	select {
	case c.ackKick <- struct{}{}:
	default:
	}
}

// ackLoop sends the acks and reads that are due, until Close: as many at a
// time as the frame budget holds, and those over it once it has grown
// again.
func (c *Client) ackLoop() {
	defer close(c.ackerDone)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		left, err := c.flushRound(c.ackCtx, false)
		if err = withoutDisconnects(err); err != nil && c.ackCtx.Err() == nil {
			c.reportError(err)
		}
		next := c.nextDue()
		if left > 0 {
			next = max(c.frames.delay(min(left, c.cfg.MaxAcking)), time.Millisecond)
		}
		t.Reset(next)
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
	for g := range c.due {
		for _, due := range [2]time.Time{g.ackDue, g.readDue} {
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
	due  time.Time // when it became due
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

// flush sends every pending ack and read, paced by the frame budget, and
// waits for their answers: Close's, after the ack loop ended.
func (c *Client) flush(ctx context.Context) error {
	_, err := c.flushRound(ctx, true)
	return err
}

// flushRound sends the acks (then the reads) that are due, or all pending
// ones if all, and waits for their answers. Without all it takes no more
// than the frame budget holds now, the longest due first, and returns how
// many it left due for the next round. Only one round runs at a time: the
// ack loop's, or Close's after the loop ended.
func (c *Client) flushRound(ctx context.Context, all bool) (left int, err error) {
	budget := -1
	if !all {
		budget = c.frames.avail()
	}
	acks, reads, left, s := c.dueCursors(all, budget)
	if len(acks) == 0 && len(reads) == 0 {
		return left, nil
	}
	if s == nil {
		c.retryLater(append(acks, reads...))
		return left, fmt.Errorf("client: flush acks: %w: not connected", ErrDisconnected)
	}
	// One ack or read goes in its own frame, as to a server without
	// cursors frames: the gateway answers those in round trips shared
	// with other connections', where a cursors frame has its own.
	if s.maxCursors > 0 && len(acks)+len(reads) > 1 {
		return left, c.sendBatched(ctx, s, append(acks, reads...))
	}
	// Acks before reads: a server may refuse a read past the ack cursor.
	err = c.sendCursors(ctx, s, acks)
	return left, errors.Join(err, c.sendCursors(ctx, s, reads))
}

// dueCursors takes the acks and reads that are due, or all pending ones if
// all, at most budget of them unless budget is -1 (or the client is not
// connected: none is sent, or the server takes cursors frames: the budget
// is of frames, and a frame carries hundreds), and returns how many it
// left due.
func (c *Client) dueCursors(all bool, budget int) (acks, reads []cursorUpdate, left int, s *session) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s = c.sess
	if s != nil && s.maxCursors > 0 {
		// In cursors frames, those due within half an interval go with
		// those due now: early, they cost nothing more.
		now = now.Add(c.cfg.AckInterval / 2)
	}
	due := func(t time.Time) bool { return !t.IsZero() && !now.Before(t) }
	// Only the groups with an ack or read due can have one to send, but
	// for Close's flush (all), which sends whatever is owed: a round of
	// the ack loop, made at every delivery to a group with none due yet,
	// looked at every group, 6 ns each, 120 us a message for a user in
	// 20,000 groups.
	var groups iter.Seq[*group] = maps.Keys(c.due)
	if all {
		groups = maps.Values(c.groups)
	}
	for g := range groups {
		if c.groups[g.gid] != g { // forgotten
			delete(c.due, g)
			continue
		}
		if g.delivered > g.acked && (all || g.unacked >= c.cfg.AckEvery || due(g.ackDue)) {
			acks = append(acks, cursorUpdate{g: g, op: protocol.OpAck, upto: g.delivered, due: g.ackDue})
		} else if g.delivered <= g.acked {
			g.unacked, g.ackDue = 0, time.Time{}
		}
		// Never read past what was delivered: the rest waits for
		// deliverLoop to hand it over, which makes the read due again.
		if all || due(g.readDue) {
			if upto := min(g.readWant, g.delivered); upto > g.read {
				reads = append(reads, cursorUpdate{g: g, op: protocol.OpRead, upto: upto, due: g.readDue})
			} else {
				g.readDue = time.Time{}
			}
		}
		if g.ackDue.IsZero() && g.readDue.IsZero() {
			delete(c.due, g)
		}
	}
	if n := len(acks) + len(reads); s != nil && s.maxCursors == 0 && budget >= 0 && n > budget {
		byDue := func(a, b cursorUpdate) int { return a.due.Compare(b.due) }
		slices.SortFunc(acks, byDue)
		slices.SortFunc(reads, byDue)
		// A read of a group whose ack waits waits too.
		waits := make(map[*group]bool)
		for _, u := range acks[min(budget, len(acks)):] {
			waits[u.g] = true
		}
		acks = acks[:min(budget, len(acks))]
		taken := reads[:0]
		for _, u := range reads {
			if len(acks)+len(taken) < budget && !waits[u.g] {
				taken = append(taken, u)
			}
		}
		reads = taken
		left = n - len(acks) - len(reads)
	}
	for _, u := range acks {
		u.g.unacked, u.g.ackDue = 0, time.Time{}
	}
	for _, u := range reads {
		u.g.readDue = time.Time{}
	}
	return acks, reads, left, s
}

// sendCursors sends every update, at most MaxAcking in flight, each once
// the frame budget has room, and waits for every answer. Refusals as
// rate_limited are reported as one, once until an update is accepted.
func (c *Client) sendCursors(ctx context.Context, s *session, ups []cursorUpdate) error {
	if len(ups) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	errs := make([]error, len(ups))
	next := make(chan int, len(ups))
	for i := range ups {
		next <- i
	}
	close(next)
	done := make(chan int, len(ups))
	for range min(c.cfg.MaxAcking, len(ups)) {
		go func() {
			for i := range next {
				errs[i] = c.sendCursor(ctx, s, ups[i])
				done <- i
			}
		}()
	}
	for range ups {
		<-done
	}
	return c.settleCursors(s, ups, errs)
}

// settleCursors records the outcome of each update, errs[i] that of
// ups[i]: taken, sent again later, or refused for good; and returns the
// failures to report. Refusals as rate_limited are reported as one, once
// until an update is accepted.
func (c *Client) settleCursors(s *session, ups []cursorUpdate, errs []error) error {
	var failed []cursorUpdate
	var all []error
	var limited, ended folded
	for i, u := range ups {
		if err := errs[i]; err != nil {
			var pe *protocol.Error
			var how string
			if u.op == protocol.OpAck && errors.As(err, &pe) && pe.Code == protocol.CodeBeyondHead {
				how = c.retake(s, u.g, u.upto)
			}
			err = fmt.Errorf("client: %s %s upto %d: %w", u.op, u.g.gid, u.upto, err)
			switch {
			case how != "":
				all = append(all, fmt.Errorf("%w; %s", err, how))
				continue
			case errors.As(err, &pe) && pe.Code == protocol.CodeRateLimited:
				limited.add(err)
				failed = append(failed, u)
				continue
			case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
				ended.add(err)
				failed = append(failed, u)
				continue
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
			all = append(all, err)
			continue
		}
		c.mu.Lock()
		u.g.retakeEnded()
		u.settle()
		c.limitedWarned = false
		c.mu.Unlock()
	}
	c.retryLater(failed)
	if limited.n > 0 {
		// Over the gateway's frame rate: the user's other connections,
		// or sends, share it. The budget starts again from none.
		c.frames.empty()
		c.mu.Lock()
		warn := !c.limitedWarned
		c.limitedWarned = true
		c.mu.Unlock()
		if warn {
			all = append(all, limited.err("refused as over the gateway's frame rate, sent again later (not reported again until one is accepted)"))
		}
	}
	if ended.n > 0 {
		all = append(all, ended.err("not sent or not answered in time"))
	}
	return errors.Join(all...)
}

// sendCursor sends u once the frame budget has room, and waits for the
// answer.
func (c *Client) sendCursor(ctx context.Context, s *session, u cursorUpdate) error {
	if err := c.frames.wait(ctx); err != nil {
		return fmt.Errorf("waiting for room among the client's frames: %w", err)
	}
	// Counted before it is written: a server may answer at once.
	c.mu.Lock()
	if u.op == protocol.OpAck {
		c.stats.Acks++
	} else {
		c.stats.Reads++
	}
	c.mu.Unlock()
	_, err := s.request(ctx, protocol.Request{Op: u.op, Gid: u.g.gid, Upto: &u.upto})
	return err
}

// folded is many failures of one kind, reported as one.
type folded struct {
	n     int
	first error
}

func (f *folded) add(err error) {
	if f.n == 0 {
		f.first = err
	}
	f.n++
}

func (f *folded) err(what string) error {
	if f.n == 1 {
		return fmt.Errorf("%w; %s", f.first, what)
	}
	return fmt.Errorf("client: %d acks and reads %s; the first: %w", f.n, what, f.first)
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
		c.due[u.g] = true
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
	switch {
	case g == nil:
		return fmt.Errorf("client: mark read %s upto %d: %w: the client holds no group %s (the last sync did not name it, and no message of it came since: is the user a member?)", gid, upto, ErrNotReceived, gid)
	case upto > g.contig && g.contig < 0:
		return fmt.Errorf("client: mark read %s upto %d: %w: the client has received none of %s's messages yet; mark read msgids OnMessage was handed, or Open(ctx, %q) to pull them", gid, upto, ErrNotReceived, gid, gid)
	case upto > g.contig:
		return fmt.Errorf("client: mark read %s upto %d: %w: the client has received %s's messages up to msgid %d (each with every one before it); mark read up to that at most", gid, upto, ErrNotReceived, gid, g.contig)
	}
	if upto <= g.readWant {
		return nil
	}
	g.readWant = upto
	if g.readDue.IsZero() {
		g.readDue = time.Now().Add(c.cfg.AckInterval)
		c.due[g] = true
		select {
		case c.ackKick <- struct{}{}:
		default:
		}
	}
	return nil
}
