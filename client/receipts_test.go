package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// OnMessage may call ReadCounts and WhoRead. A server that never answers
// them (this peer does not know those ops) keeps the connection alive, so
// only Close can end the wait: Close waits for OnMessage, and ends the
// call with ErrClosed rather than waiting for ever.
func TestCloseEndsAReceiptsCallOfOnMessageTheServerDoesNotAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(ctx context.Context, c *Client, m protocol.Message) error
	}{
		{"ReadCounts", func(ctx context.Context, c *Client, m protocol.Message) error {
			_, err := c.ReadCounts(ctx, m.Gid, []int64{m.MsgID})
			return err
		}},
		{"WhoRead", func(ctx context.Context, c *Client, m protocol.Message) error {
			_, _, err := c.WhoRead(ctx, m.Gid, m.MsgID)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			asked, callErr := make(chan struct{}), make(chan error, 1)
			var c *Client
			c, _ = dial(t, p, "alice", func(cfg *Config) {
				cfg.OnMessage = func(m protocol.Message) {
					close(asked)
					callErr <- tc.call(ctx, c, m)
				}
			})
			p.post("g1", "bob", "who read this?")
			<-asked
			time.Sleep(50 * time.Millisecond) // the call waits for its answer

			closeWithin3s(t, c, cancel, fmt.Sprintf("it waits for OnMessage, whose %s waits for an answer", tc.name))
			if err := <-callErr; !errors.Is(err, ErrClosed) {
				t.Fatalf("%s from OnMessage during Close: %v, want ErrClosed", tc.name, err)
			}
		})
	}
}

// closeWithin3s closes c and fails t, saying why, when Close is still
// blocked 3 s later; it then cancels the test's ctx to let Close end.
func closeWithin3s(t *testing.T, c *Client, cancel context.CancelFunc, why string) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		cancel()
		<-closed
		t.Fatal("Close still blocked after 3 s: " + why)
	}
}
