package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// connectFirst makes Dial's connection. One the server ends or refuses
// asking to be made again (askedToRetry) is made again after a back-off,
// MinBackoff doubling to MaxBackoff as in run, until ctx ends; each such
// error goes to OnError. Every other failure is returned at once: a server
// that is down, or a token refused, must not hold Dial until ctx ends,
// which may be never.
func (c *Client) connectFirst(ctx context.Context) (*session, error) {
	bo := backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff}
	var asked error // the last failure the server asked to retry
	for {
		s, err := c.connect(ctx)
		switch {
		case err == nil:
			return s, nil
		case ctx.Err() != nil && asked != nil:
			return nil, tiredOf(asked, ctx)
		case !askedToRetry(err):
			return nil, err
		}
		asked = err
		c.reportError(err)
		if !sleep(ctx, bo.next()) {
			return nil, tiredOf(asked, ctx)
		}
	}
}

// tiredOf is Dial's error when ctx ended while the server kept asking it
// to try again: it wraps both.
func tiredOf(asked error, ctx context.Context) error {
	return fmt.Errorf("client: dial: the server asked to try again, and ctx ended first (%w): %w", context.Cause(ctx), asked)
}

// askedToRetry tells whether the server meant err, the end of a connection
// being made, to be tried again after a back-off: a close with 1013 (try
// again later: a gateway could not register the connection), 1012 (service
// restart) or 1001 (going away: a gateway shutting down), or a refusal,
// of the upgrade, the auth or the sync, as unavailable or overloaded.
func askedToRetry(err error) bool {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code == protocol.CodeUnavailable || pe.Code == protocol.CodeOverloaded
	}
	switch websocket.CloseStatus(err) {
	case websocket.StatusTryAgainLater, websocket.StatusServiceRestart, websocket.StatusGoingAway:
		return true
	}
	return false
}

// refusal is the *protocol.Error a gateway answered a WebSocket upgrade
// with instead of upgrading (503 unavailable while it starts or shuts
// down, overloaded past its connections authenticating), or nil if resp
// carries none: no answer, or one of something else (a proxy's 503 page).
// A gateway's answer is UTF-8 (encoding/json writes no other): one that is
// not is something else, whose bad bytes would each grow to a U+FFFD.
func refusal(resp *http.Response) error {
	if resp == nil || resp.Body == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	b, _ := io.ReadAll(resp.Body) // the first KiB, kept by websocket.Dial
	var e struct {
		Code    protocol.Code `json:"code"`
		Message string        `json:"message"`
	}
	if !utf8.Valid(b) || json.Unmarshal(b, &e) != nil || e.Code == "" {
		return nil
	}
	return fmt.Errorf("HTTP %d: %w", resp.StatusCode, &protocol.Error{Code: e.Code, Message: e.Message})
}
