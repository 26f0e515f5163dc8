package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// Send sends body to group gid and returns the message's msgid. It makes one
// client message id (cmid) for the call and resends with it after
// SendTimeout or a reconnect, until the server accepts, refuses for good, or
// ctx ends: however many resends, the group gets one message. The message
// itself reaches OnMessage by push like any other.
//
// A Send that ends without the server's answer on it (its ctx ended, or
// Close) returns a *SendError, which wraps ctx's error (or ErrClosed) and
// gives the cmid. When an attempt reached the server and its answer was
// lost, the message may have been stored (MaybeStored): resend it with
// SendWithID and that cmid, which posts it at most once; a new Send would
// post it again. A refusal for good (not a member, a body over the limit)
// stored nothing and is returned as the server's *protocol.Error, wrapped.
// A body over the limit the server gives when the client connects
// (max_body) is refused so without being sent (body_too_large): its frame
// might be over the server's frame limit, which would close the connection
// and hold up every send in flight on it until the reconnect. A server
// that gives none closes the connection on such a frame (1009); that send
// is refused the same way, not sent again.
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
	if !utf8.ValidString(body) {
		// JSON would carry it with U+FFFD in place of the bytes that are
		// not UTF-8: another text than the one given.
		return 0, errors.New("client: send: the body is not valid UTF-8; send text")
	}
	if c.isClosing() {
		return 0, ErrClosed
	}
	req := protocol.Request{Op: protocol.OpSend, Gid: gid, Cmid: cmid, Body: body}
	bo := backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff}
	end := &SendError{Gid: gid, Cmid: cmid}
	for attempt := 0; ; attempt++ {
		episode, err := c.sending.enter(ctx, c.stopDeliver)
		if err != nil {
			end.Err = err
			return 0, end
		}
		id, again, err := c.sendOnce(ctx, &req, attempt, episode, &bo, end)
		if !again {
			switch {
			case err == nil:
				return id, nil
			case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed):
				end.Err = err
				return 0, end
			}
			return 0, fmt.Errorf("client: send %s: %w", cmid, err)
		}
		if c.isClosing() {
			if !end.MaybeStored {
				return 0, ErrClosed
			}
			end.Err = ErrClosed
			return 0, end
		}
	}
}

// SendError is the error of a Send or SendWithID that ended without the
// server's answer on it: its ctx ended, or Close.
type SendError struct {
	Gid, Cmid string
	// MaybeStored is true when an attempt reached the server and its
	// answer was lost (a timeout, a lost connection, unavailable): the
	// group may hold the message. Resend it with SendWithID(ctx, Gid,
	// Cmid, body): the group gets it once however often it is sent with
	// its cmid, where a new Send would post it again.
	MaybeStored bool
	Err         error // ctx's error, or ErrClosed

	overloaded error // the server's last refusal of the send as overloaded or rate_limited: nothing stored
}

func (e *SendError) Error() string {
	why := e.Err.Error()
	if e.overloaded != nil {
		code := protocol.CodeOverloaded
		if pe, ok := errors.AsType[*protocol.Error](e.overloaded); ok {
			code = pe.Code
		}
		why = fmt.Sprintf("refused by the server as %s (%v), then %v", code, e.overloaded, e.Err)
	}
	switch {
	case e.MaybeStored:
		return fmt.Sprintf("client: send %s to %s: %s; the message may have been stored: resend it with SendWithID(ctx, %q, %q, body), "+
			"the same cmid, which stores it at most once, since Send would post it again under a new cmid", e.Cmid, e.Gid, why, e.Gid, e.Cmid)
	case e.overloaded != nil:
		return fmt.Sprintf("client: send %s: %s; resend it later with the same cmid (SendWithID): the group gets one message however often it is sent", e.Cmid, why)
	}
	return fmt.Sprintf("client: send %s: %s", e.Cmid, why)
}

func (e *SendError) Unwrap() error { return e.Err }

// sendOnce makes one attempt of a send within a place of the window, entered
// in episode, and waits before the next if one is due (again). It records
// in end an attempt whose answer was lost, and a refusal as overloaded.
func (c *Client) sendOnce(ctx context.Context, req *protocol.Request, attempt, episode int, bo *backoff, end *SendError) (id int64, again bool, err error) {
	accepted := false
	defer func() { c.sending.leave(accepted) }()
	cmid := req.Cmid
	s, err := c.waitSession(ctx)
	if err != nil {
		if last := c.lastConnectError(); last != nil {
			return 0, false, fmt.Errorf("%w (not connected; the last attempt: %v)", err, last)
		}
		return 0, false, err
	}
	if s.maxBody > 0 && len(req.Body) > s.maxBody {
		// Its frame may be past the server's frame limit, which would
		// close the connection (1009) and every request in flight on it.
		return 0, false, &protocol.Error{Code: protocol.CodeBodyTooLarge,
			Message: fmt.Sprintf("the body is %d bytes; the server takes at most %d (its authed frame's max_body): split the message", len(req.Body), s.maxBody)}
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
	end.MaybeStored = end.MaybeStored || err != nil && mayBeStored(err)
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
	case errors.As(err, &pe) && (pe.Code == protocol.CodeOverloaded || pe.Code == protocol.CodeRateLimited):
		// The pause holds every send of the client; this one waits
		// for it in enter, out of the window. Over the user's rate of
		// sends, too: each send backing off on its own, in its place of
		// the window, sent the rest on at the same rate, to be refused.
		c.mu.Lock()
		if pe.Code == protocol.CodeOverloaded {
			c.stats.Overloaded++
		} else {
			c.stats.RateLimited++
		}
		c.mu.Unlock()
		end.overloaded = err
		d := c.sending.overloaded(episode)
		c.log.Debug("chat client: sends paused", "code", pe.Code, "cmid", cmid, "pause", d)
		return 0, true, nil
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

// mayBeStored reports whether a send whose request failed with err may have
// been stored: the answer was lost (a timeout, a lost connection, ctx
// ended), or the server failed midway (unavailable, internal: a write to
// the log cut short may still land). Other refusals come before the
// server stores anything.
func mayBeStored(err error) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code == protocol.CodeUnavailable || pe.Code == protocol.CodeInternal
	}
	return true
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
