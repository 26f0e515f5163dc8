package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/groupchat/chatd/protocol"
)

// ReadCounts asks how many members have read each of msgids in gid (the
// offline sender's catch-up, and polling for very large groups). Messages
// the server no longer keeps receipts for are left out.
func (c *Client) ReadCounts(ctx context.Context, gid string, msgids []int64) ([]protocol.ReadCount, error) {
	f, err := c.ask(ctx, protocol.Request{Op: protocol.OpReadCounts, Gid: gid, MsgIDs: msgids})
	if err != nil {
		return nil, fmt.Errorf("client: read counts of %s: %w", gid, err)
	}
	return f.Counts, nil
}

// WhoRead lists who has read one message of gid and who has not, among the
// members when it was sent (its sender excluded). Its frame is the
// application's, as a send is, but what the gateway charges for its answer
// beyond it (a frame more per protocol.WhoReadPer ids it lists) is taken
// from the client's budget of frames: its acks, reads and pulls after it
// keep to the gateway's rate.
func (c *Client) WhoRead(ctx context.Context, gid string, msgid int64) (read, unread []string, err error) {
	f, err := c.ask(ctx, protocol.Request{Op: protocol.OpWhoRead, Gid: gid, MsgID: &msgid})
	if err != nil {
		return nil, nil, fmt.Errorf("client: who read %s/%d: %w", gid, msgid, err)
	}
	c.frames.charge(protocol.WhoReadFrames(len(f.Read) + len(f.Unread)))
	return f.Read, f.Unread, nil
}

// ask makes req on the ready session, waiting for one if needed, and waits
// for its answer until ctx ends or Close begins (ErrClosed): Close waits for
// OnMessage, which may be asking. A request the connection's end cuts
// short once Close has begun ends with ErrClosed too: Close ended it.
func (c *Client) ask(ctx context.Context, req protocol.Request) (*frame, error) {
	if c.isClosing() {
		return nil, ErrClosed
	}
	s, err := c.waitSession(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-c.stopDeliver:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()
	f, err := s.request(ctx, req)
	if err != nil && (errors.Is(context.Cause(ctx), ErrClosed) || errors.Is(err, ErrDisconnected) && c.isClosing()) {
		return nil, ErrClosed
	}
	return f, err
}
