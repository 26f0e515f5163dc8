package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// MemberCursors is one member's position in one group.
type MemberCursors struct {
	Head        int64 // the group's newest persisted msgid; -1: none
	Ack         int64 // -1: none
	Read        int64 // -1: none
	Unread      int64 // messages after Read in the window
	UnreadExact bool  // false: the window ends above Read; Unread is a lower bound
}

// MemberCursors returns uid's cursors in each of gids, in two round trips
// whatever the number of groups (a login syncs every group at once).
func (r *Redis) MemberCursors(ctx context.Context, uid string, gids []string) (map[string]MemberCursors, error) {
	out := make(map[string]MemberCursors, len(gids))
	if len(gids) == 0 {
		return out, nil
	}
	heads := make([]*redis.StringCmd, len(gids))
	acks := make([]*redis.FloatCmd, len(gids))
	reads := make([]*redis.FloatCmd, len(gids))
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, g := range gids {
			heads[i] = p.Get(ctx, headKey(g))
			acks[i] = p.ZScore(ctx, ackKey(g), uid)
			reads[i] = p.ZScore(ctx, readKey(g), uid)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: cursors of %q: %w", uid, err)
	}
	// Each count is taken with its floor, in one script (see Unread).
	calls := make([]scriptCall, len(gids))
	for i, g := range gids {
		calls[i] = unreadCall(g, scoreOr(reads[i], -1))
	}
	counts, err := r.runScript(ctx, unreadScript, calls)
	if err != nil {
		return nil, fmt.Errorf("store: unread counts of %q: %w", uid, err)
	}
	for i, g := range gids {
		head, ok, err := optionalMsgID(heads[i])
		if err != nil {
			return nil, fmt.Errorf("store: head of %q: %w", g, err)
		}
		if !ok {
			head = -1
		}
		read := scoreOr(reads[i], -1)
		n, exact, err := unreadResult(counts[i], read)
		if err != nil {
			return nil, fmt.Errorf("store: unread count of %q in %q: %w", uid, g, err)
		}
		out[g] = MemberCursors{Head: head, Ack: scoreOr(acks[i], -1), Read: read, Unread: n, UnreadExact: exact}
	}
	return out, nil
}

// CursorState is what deciding on one ack or read needs: the member's
// membership, the group's head and the member's cursors in it.
type CursorState struct {
	Member Membership
	Head   int64 // the group's newest persisted msgid; -1: none
	Ack    int64 // -1: none
	Read   int64 // -1: none
}

// CursorState returns uid's CursorState in gid in one round trip, with a
// leave noted by MarkLeaving taken as projected, and checked against
// built's replay mark as Membership does. Calls made while another's round
// trip is under way share the next one (see cursorBatch): when every
// member of a group acks the same message at once, the acks cost a few
// round trips, not one each.
func (r *Redis) CursorState(ctx context.Context, gid, uid string, built *Fence) (CursorState, error) {
	return r.states.do(ctx, r, &cursorQuery{gid: gid, uid: uid, built: built})
}

// cursorQuery is one CursorState call: its commands, then its answer.
type cursorQuery struct {
	gid, uid string
	built    *Fence

	marked    *redis.BoolCmd
	member    *redis.StringCmd
	leaving   *redis.StringCmd
	head      *redis.StringCmd
	ack, read *redis.FloatCmd

	st   CursorState
	err  error
	done chan struct{} // closed once st and err are set; nil for the caller's own round trip
}

// queue adds q's commands to p.
func (q *cursorQuery) queue(ctx context.Context, p redis.Pipeliner) {
	q.marked = q.built.checkReplayed(ctx, p)
	q.member = p.HGet(ctx, membersKey(q.gid), q.uid)
	q.leaving = p.Get(ctx, leavingKey(q.gid, q.uid))
	q.head = p.Get(ctx, headKey(q.gid))
	q.ack = p.ZScore(ctx, ackKey(q.gid), q.uid)
	q.read = p.ZScore(ctx, readKey(q.gid), q.uid)
}

// result is q's answer, from its commands, once the round trip is done.
func (q *cursorQuery) result() (CursorState, error) {
	for _, c := range []redis.Cmder{q.member, q.leaving, q.head, q.ack, q.read} {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return CursorState{}, fmt.Errorf("store: cursors of %q in %q: %w", q.uid, q.gid, err)
		}
	}
	if err := q.built.replayed(q.marked); err != nil {
		return CursorState{}, err
	}
	st := CursorState{Member: Membership{State: MemberNone}, Head: -1, Ack: scoreOr(q.ack, -1), Read: scoreOr(q.read, -1)}
	if v, err := q.member.Result(); err == nil {
		if st.Member, err = parseMembership(v); err != nil {
			return CursorState{}, fmt.Errorf("store: membership of %q in %q: %w", q.uid, q.gid, err)
		}
		st.Member = st.Member.withLeave(q.leaving.Val())
	}
	h, ok, err := optionalMsgID(q.head)
	if err != nil {
		return CursorState{}, fmt.Errorf("store: head of %q: %w", q.gid, err)
	}
	if ok {
		st.Head = h
	}
	return st, nil
}

func scoreOr(c *redis.FloatCmd, def int64) int64 {
	v, err := c.Result()
	if err != nil {
		return def
	}
	return int64(v)
}
