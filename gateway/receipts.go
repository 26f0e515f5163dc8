package gateway

import (
	"context"
	"errors"
	"slices"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// readCounts answers read_counts: any member may ask, for messages it can see.
func (g *Gateway) readCounts(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	m, perr := g.member(ctx, uid, r.Gid)
	if perr != nil {
		return nil, perr
	}
	ids := slices.Clone(r.MsgIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	senders, st, perr := g.readState(ctx, r.Gid, ids)
	if perr != nil {
		return nil, perr
	}
	out := &protocol.Counts{Op: protocol.OpCounts, ID: r.ID, Gid: r.Gid, Counts: make([]protocol.ReadCount, 0, len(ids))}
	for _, id := range ids {
		sender, ok := senders[id]
		if !ok || !m.Sees(id) {
			out.Unknown = append(out.Unknown, id)
			continue
		}
		read, aud := st.Count(id, sender)
		out.Counts = append(out.Counts, protocol.ReadCount{MsgID: id, Read: read, Audience: aud})
	}
	return out, nil
}

// whoRead answers who_read for one message the member can see.
func (g *Gateway) whoRead(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	m, perr := g.member(ctx, uid, r.Gid)
	if perr != nil {
		return nil, perr
	}
	id := *r.MsgID
	senders, st, perr := g.readState(ctx, r.Gid, []int64{id})
	if perr != nil {
		return nil, perr
	}
	sender, ok := senders[id]
	if !ok || !m.Sees(id) {
		return nil, protocol.Errorf(protocol.CodeNotFound, "no message %d in %s that you can see (receipts are kept for the recent window)", id, r.Gid)
	}
	read, unread := st.Who(id, sender)
	return &protocol.Readers{Op: protocol.OpReaders, ID: r.ID, Gid: r.Gid, MsgID: id,
		Read: nonNil(read), Unread: nonNil(unread)}, nil
}

// extraFrames is what an answer to req costs beyond the frame (or HTTP
// request) that asked for it: who_read's, one frame per
// protocol.WhoReadPer ids it lists; sync's, one per protocol.SyncPer
// groups; a cursors frame's, one per protocol.CursorsPer entries of req,
// whatever its answer.
// The asker's bucket is charged once the answer is known, into debt if need
// be, paid by the frames refused after: a connection, or a user over HTTP,
// is sent at most protocol.WhoReadPer ids per frame of its rate, 500 x
// 131 bytes (an id of 128 bytes, quoted, and a comma), 12.5 MiB a second
// at the default 200 frames.
func extraFrames(req *protocol.Request, ans any) int {
	if req.Op == protocol.OpCursors {
		return protocol.CursorsFrames(len(req.Acks) + len(req.Reads))
	}
	switch r := ans.(type) {
	case *protocol.Readers:
		if r != nil {
			return protocol.WhoReadFrames(len(r.Read) + len(r.Unread))
		}
	case *protocol.Synced:
		if r != nil {
			return syncFrames(r)
		}
	}
	return 0
}

// readState returns the senders of the messages ids that are in gid's
// window, and gid's read state.
func (g *Gateway) readState(ctx context.Context, gid string, ids []int64) (map[int64]string, *store.ReadState, *protocol.Error) {
	senders, err := g.cfg.Redis.WindowSenders(ctx, gid, ids)
	if err != nil {
		return nil, nil, g.unavailable("messages", err)
	}
	// Read cursors being rebuilt (chatctl rebuild receipts) or replayed
	// after a Redis loss would count too few readers: the answer waits.
	st, err := g.readStates.get(ctx, g.cfg.Redis, gid, func() error {
		part, err := g.cfg.Producer.Partition(ctx, topics.Receipts, gid)
		if err != nil {
			return err
		}
		return g.cfg.Redis.CheckReplayed(ctx, consumers.GroupReceiptProjector, topics.Receipts, part)
	})
	if errors.Is(err, store.ErrReplaying) {
		return nil, nil, g.rebuildErr(err, "the read cursors of "+gid)
	}
	if err != nil {
		return nil, nil, g.unavailable("read cursors", err)
	}
	return senders, st, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
