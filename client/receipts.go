package client

import (
	"context"
	"fmt"

	"github.com/groupchat/chatd/protocol"
)

// ReadCounts asks how many members have read each of msgids in gid (the
// offline sender's catch-up, and polling for very large groups). Messages
// the server no longer keeps receipts for are left out.
func (c *Client) ReadCounts(ctx context.Context, gid string, msgids []int64) ([]protocol.ReadCount, error) {
	s, err := c.waitSession(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: read counts of %s: %w", gid, err)
	}
	f, err := s.request(ctx, protocol.Request{Op: protocol.OpReadCounts, Gid: gid, MsgIDs: msgids})
	if err != nil {
		return nil, fmt.Errorf("client: read counts of %s: %w", gid, err)
	}
	return f.Counts, nil
}

// WhoRead lists who has read one message of gid and who has not, among the
// members when it was sent (its sender excluded).
func (c *Client) WhoRead(ctx context.Context, gid string, msgid int64) (read, unread []string, err error) {
	s, err := c.waitSession(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("client: who read %s/%d: %w", gid, msgid, err)
	}
	f, err := s.request(ctx, protocol.Request{Op: protocol.OpWhoRead, Gid: gid, MsgID: &msgid})
	if err != nil {
		return nil, nil, fmt.Errorf("client: who read %s/%d: %w", gid, msgid, err)
	}
	return f.Read, f.Unread, nil
}
