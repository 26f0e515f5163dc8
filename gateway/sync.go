package gateway

import (
	"context"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
)

// A sync lists the user's groups with their counts: every group joined,
// and the groups left that still hold something for the user. A group
// left is listed while a message of it from before the leave is not acked
// or not read, for LeftListed at most after the first sync that listed it
// as left; then no more, and the user's syncs cost nothing for it (a
// user who joined and left thousands of groups paid a Redis script for
// each at every login). What came before the leave may still be pulled.
// The sync notes each group left that it lists the first time, or drops
// (store.NoteLeft), and reads no cursors of a group noted dropped.

func (g *Gateway) sync(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	// Read between two checks, as wholeMembers: a list read while the
	// member projector replays misses groups, and the client would pull
	// none of their messages until its next sync.
	if perr := g.rebuildingAny(ctx); perr != nil {
		return nil, perr
	}
	groups, notes, err := g.cfg.Redis.SyncGroups(ctx, uid)
	if err != nil {
		return nil, g.unavailable("groups", err)
	}
	if perr := g.rebuildingAny(ctx); perr != nil {
		return nil, perr
	}
	now := time.Now().UnixMilli()
	gids := make([]string, 0, len(groups))
	for gid, m := range groups {
		if m.State == store.MemberNone {
			continue
		}
		if n, ok := notes[gid]; ok && n.About(m) && (n.Until == 0 || now >= n.Until) {
			continue // dropped
		}
		gids = append(gids, gid)
	}
	cur, err := g.memberCursors(ctx, uid, gids)
	if err != nil {
		return nil, g.unavailable("cursors", err)
	}
	left := map[string]leftAt{}
	for _, gid := range gids {
		c := cur[gid]
		if m := c.Membership(groups[gid]); m.State == store.MemberLeft { // a leave written and not yet projected, as pull takes it
			left[gid] = leftAt{m, c.Head}
		}
	}
	leftHeads := g.leftHeadsOf(ctx, left)
	noting := map[string]store.LeftNote{}
	out := &protocol.Synced{Op: protocol.OpSynced, ID: r.ID, Groups: make([]protocol.GroupState, 0, len(gids))}
	for _, gid := range gids {
		c := cur[gid]
		m := c.Membership(groups[gid])
		st := protocol.GroupState{Gid: gid, Head: c.Head, Ack: max(c.Ack, m.JoinedAt), Read: max(c.Read, m.JoinedAt),
			Unread: c.Unread, UnreadExact: c.UnreadExact}
		if m.State == store.MemberLeft {
			st.Left = true
			st.Head = leftHeads[gid]
			// Not counted for a group one has left: 0 is a lower bound ("0+").
			st.Unread, st.UnreadExact = 0, st.Head <= st.Read
			read := st.Ack >= st.Head && st.Read >= st.Head && g.leftHeadFinal(ctx, gid, m, c.Head)
			if n, listed := g.leftListed(m, notes[gid], st, read, now); !listed || n != notes[gid] {
				noting[gid] = n
				if !listed {
					continue
				}
			}
		}
		out.Groups = append(out.Groups, st)
	}
	if err := g.cfg.Redis.NoteLeft(ctx, uid, noting); err != nil {
		// The groups are listed, or dropped, all the same; the next sync
		// notes them.
		g.log.Warn("cannot note the groups a sync lists as left", "uid", uid, "err", err)
	}
	sortGroups(out.Groups)
	return out, nil
}

// leftListed decides whether a sync at now lists st, the state of a group
// m left, of which n is the user's note (LeftNote{} when none), and
// returns the note to keep: listed until n.Until, the first listing's
// time and LeftListed, while the member has not both acked and read up to
// the last message before the leave; dropped once they have (read).
func (g *Gateway) leftListed(m store.Membership, n store.LeftNote, st protocol.GroupState, read bool, now int64) (store.LeftNote, bool) {
	if read {
		return store.LeftNote{JoinedAt: m.JoinedAt, LeftAt: m.LeftAt}, false
	}
	if !n.About(m) || n.Until == 0 {
		n = store.LeftNote{JoinedAt: m.JoinedAt, LeftAt: m.LeftAt, Until: now + g.cfg.LeftListed.Milliseconds()}
	}
	return n, now < n.Until
}

// leftHeadFinal reports whether head, gid's newest message in Redis, tells
// the last message m saw before leaving: it is past the leave, or the
// persister has stored gid's partition up to the leave. Else a message
// sent before the leave may yet come (its push lost), and a group dropped
// from the sync on the head as it lags would never bring it.
func (g *Gateway) leftHeadFinal(ctx context.Context, gid string, m store.Membership, head int64) bool {
	if head > m.LeftAt {
		return true
	}
	_, ok := g.persistedHead(ctx, gid, m.LeftAt)
	return ok
}
