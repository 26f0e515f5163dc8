package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// Send sends body to group gid and returns the message's msgid. It makes one
// client message id (cmid) for the call and resends with it after
// SendTimeout or a reconnect, until the server accepts, refuses for good, or
// ctx ends: however many resends, the group gets one message. The message
// itself reaches OnMessage by push like any other. The error of a Send whose
// ctx ended wraps ctx's error, and says whether the server had refused the
// send as overloaded: such a send may be made again later with its cmid
// (SendWithID).
func (c *Client) Send(ctx context.Context, gid, body string) (int64, error) {
	return c.SendWithID(ctx, gid, NewCmid(), body)
}

// NewCmid returns a random client message id, valid as a cmid.
func NewCmid() string { return "c-" + rand.Text() }

// SendWithID is Send with the caller's cmid, for a caller that must resend
// across restarts of its process (persist the cmid before the first call).
func (c *Client) SendWithID(ctx context.Context, gid, cmid, body string) (int64, error) {
	if err := schema.ValidID(gid); err != nil {
		return 0, fmt.Errorf("client: send: gid: %w", err)
	}
	if err := schema.ValidID(cmid); err != nil {
		return 0, fmt.Errorf("client: send: cmid: %w", err)
	}
	if body == "" {
		return 0, errors.New("client: send: empty body")
	}
	if c.isClosing() {
		return 0, ErrClosed
	}
	req := protocol.Request{Op: protocol.OpSend, Gid: gid, Cmid: cmid, Body: body}
	bo := backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff}
	var refused error // the server's last refusal of the send as overloaded
	for attempt := 0; ; attempt++ {
		episode, err := c.sending.enter(ctx, c.stopDeliver)
		if err != nil {
			return 0, sendError(cmid, err, refused)
		}
		id, again, err := c.sendOnce(ctx, &req, attempt, episode, &bo)
		if !again {
			if err != nil {
				return 0, sendError(cmid, err, refused)
			}
			return id, nil
		}
		if err != nil {
			refused = err
		}
		if c.isClosing() {
			return 0, ErrClosed
		}
	}
}

// sendError words the end of send cmid with err. A send the server refused
// as overloaded (refused) whose ctx then ended says so: it can be resent
// later.
func sendError(cmid string, err, refused error) error {
	if refused == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("client: send %s: %w", cmid, err)
	}
	return fmt.Errorf("client: send %s: refused by the server as overloaded (%v), then %w; "+
		"resend it later with the same cmid (SendWithID): the group gets one message however often it is sent", cmid, refused, err)
}

// sendOnce makes one attempt of a send within a place of the window, entered
// in episode, and waits before the next if one is due (again; with the
// server's refusal as err if it refused the send as overloaded).
func (c *Client) sendOnce(ctx context.Context, req *protocol.Request, attempt, episode int, bo *backoff) (id int64, again bool, err error) {
	accepted := false
	defer func() { c.sending.leave(accepted) }()
	cmid := req.Cmid
	s, err := c.waitSession(ctx)
	if err != nil {
		return 0, false, err
	}
	if attempt > 0 {
		c.mu.Lock()
		c.stats.Resends++
		c.mu.Unlock()
		c.log.Debug("chat client: resend", "gid", req.Gid, "cmid", cmid, "attempt", attempt)
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.SendTimeout)
	f, err := s.request(rctx, *req)
	cancel()
	switch {
	case err == nil && f.Op == protocol.OpAccepted && f.Cmid == cmid:
		accepted = true
		return f.MsgID, false, nil
	case err == nil:
		return 0, false, fmt.Errorf("the server answered the send with %q (cmid %q), not accepted: a server fault; send again with the same cmid, which cannot write it twice", f.Op, f.Cmid)
	case ctx.Err() != nil:
		return 0, false, ctx.Err()
	}
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe) && pe.Code == protocol.CodeOverloaded:
		// The pause holds every send of the client; this one waits
		// for it in enter, out of the window.
		c.mu.Lock()
		c.stats.Overloaded++
		c.mu.Unlock()
		d := c.sending.overloaded(episode)
		c.log.Debug("chat client: server overloaded; sends paused", "cmid", cmid, "pause", d)
		return 0, true, err
	case errors.As(err, &pe):
		if !retryable(pe.Code) {
			return 0, false, err
		}
		if err := c.backOff(ctx, bo.next(), err); err != nil {
			return 0, false, err
		}
	case errors.Is(err, ErrDisconnected):
		// Resend on the next connection, once this one has ended.
		select {
		case <-s.done:
		case <-ctx.Done():
			return 0, false, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
	default:
		// A timeout: the answer was lost, or the server is overloaded
		// and every client resending at once would keep it so. Resend
		// after a back-off.
		if err := c.backOff(ctx, bo.next(), err); err != nil {
			return 0, false, err
		}
	}
	return 0, true, nil
}

// backOff waits d before a resend whose last attempt failed with last. It
// ends early with ctx's error, or with ErrClosed once Close has begun: Close
// waits for OnMessage, which may be sending.
func (c *Client) backOff(ctx context.Context, d time.Duration, last error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
	case <-c.stopDeliver:
		return ErrClosed
	}
}

// retryable reports whether a request refused with code may succeed later
// unchanged.
func retryable(code protocol.Code) bool {
	switch code {
	case protocol.CodeUnavailable, protocol.CodeOverloaded, protocol.CodeRateLimited, protocol.CodeInternal,
		protocol.CodeUnauthenticated, protocol.CodeTokenExpired:
		return true
	}
	return false
}
