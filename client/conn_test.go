package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// OnMessage may call Send and Open, which wait for a connection while the
// client is disconnected. Close, which waits for OnMessage, ends that wait
// with ErrClosed: it is what an app calls when it gives up on the server.
func TestCloseEndsASendOrOpenOfOnMessageWaitingForAConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(c *Client, m protocol.Message) error
	}{
		{"Send", func(c *Client, m protocol.Message) error {
			_, err := c.Send(context.Background(), m.Gid, "auto-reply")
			return err
		}},
		{"Open", func(c *Client, _ protocol.Message) error { return c.Open(context.Background(), "g2") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"alice", "bob"}})
			entered, release := make(chan struct{}), make(chan struct{})
			callErr := make(chan error, 1)
			var c *Client
			c, _ = dial(t, p, "alice", func(cfg *Config) {
				cfg.OnMessage = func(m protocol.Message) {
					close(entered)
					<-release
					callErr <- tc.call(c, m)
				}
			})
			p.post("g1", "bob", "reply to me")
			<-entered
			p.set(func(p *peer) { p.refuse = true }) // the server is gone
			p.kill()
			waitFor(t, "the disconnect", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.sess == nil })
			close(release)
			time.Sleep(50 * time.Millisecond) // the call waits for a connection

			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case <-closed:
			case <-time.After(3 * time.Second):
				p.set(func(p *peer) { p.refuse = false }) // let it end, for the leak check
				<-closed
				t.Fatalf("Close still blocked after 3 s: it waits for OnMessage, whose %s waits for a connection", tc.name)
			}
			if err := <-callErr; !errors.Is(err, ErrClosed) {
				t.Fatalf("%s from OnMessage during Close: %v, want ErrClosed", tc.name, err)
			}
		})
	}
}
