package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
)

// The errors of a run are counted by what the server or the wait said:
// a disconnect by the close code it carried.
func TestErrorCodeNamesWhatEndedTheSend(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&protocol.Error{Code: protocol.CodeOverloaded, Message: "busy"}, "overloaded"},
		{fmt.Errorf("%w: %w", client.ErrDisconnected, websocket.CloseError{Code: 4008, Reason: "too slow"}), "disconnected_4008"},
		{fmt.Errorf("%w: %w", client.ErrDisconnected, websocket.CloseError{Code: websocket.StatusTryAgainLater}), "disconnected_1013"},
		{fmt.Errorf("%w: read: EOF", client.ErrDisconnected), "disconnected"},
		{context.DeadlineExceeded, "timeout"},
		{errors.New("something else"), "other"},
	} {
		if got := errorCode(tc.err); got != tc.want {
			t.Errorf("errorCode(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
