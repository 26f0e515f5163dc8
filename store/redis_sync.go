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

	leaving string // the note of a leave written and not yet projected (MarkLeaving)
}

// Membership returns m, the member's projected membership in the group,
// with a leave written but not yet projected taken as projected, as
// Membership and CursorState take it.
func (c MemberCursors) Membership(m Membership) Membership { return m.withLeave(c.leaving) }

// MemberCursors returns uid's cursors in each of gids in one round trip
// whatever the number of groups (a login syncs every group at once). Each
// group's head, cursors and count are read in one script, so they are of
// one moment: the count is of the messages after the read cursor up to the
// head, never of one appended after the head was read.
func (r *Redis) MemberCursors(ctx context.Context, uid string, gids []string) (map[string]MemberCursors, error) {
	out := make(map[string]MemberCursors, len(gids))
	if len(gids) == 0 {
		return out, nil
	}
	calls := make([]scriptCall, len(gids))
	for i, g := range gids {
		calls[i] = scriptCall{keys: []string{headKey(g), ackKey(g), readKey(g), windowKey(g), floorKey(g), leavingKey(g, uid)}, args: []any{uid}}
	}
	cmds, err := r.runScript(ctx, syncScript, calls)
	if err != nil {
		return nil, fmt.Errorf("store: cursors of %q: %w", uid, err)
	}
	for i, g := range gids {
		c, err := syncResult(cmds[i])
		if err != nil {
			return nil, fmt.Errorf("store: cursors of %q in %q: %w", uid, g, err)
		}
		out[g] = c
	}
	return out, nil
}

// syncScript reads one member's position in one group. KEYS: head, ack,
// read, win, floor, the member's leaving note. ARGV: uid. It answers
// {head, ack, read, count, floor, note}, "" for what is absent; count is
// of the window's messages above the read cursor and the floor, up to the
// head.
var syncScript = redis.NewScript(luaNum + `
local head = redis.call('GET', KEYS[1])
local ack = redis.call('ZSCORE', KEYS[2], ARGV[1])
local read = redis.call('ZSCORE', KEYS[3], ARGV[1])
local f = redis.call('GET', KEYS[5])
local lo = num(read or '-1')
local fl = f and num(f)
if fl and lo and fl > lo then lo = fl end
local hi = head and num(head)
local n = 0
if hi and lo and hi > lo then
  n = redis.call('ZCOUNT', KEYS[4], '(' .. string.format('%d', lo), string.format('%d', hi))
end
return {head or '', ack or '', read or '', n, f or '', redis.call('GET', KEYS[6]) or ''}
`)

// syncResult reads a syncScript answer.
func syncResult(cmd *redis.Cmd) (MemberCursors, error) {
	v, err := cmd.Slice()
	if err != nil {
		return MemberCursors{}, err
	}
	if len(v) != 6 {
		return MemberCursors{}, fmt.Errorf("%w: sync answered %v", ErrCorruptValue, v)
	}
	var ids [3]int64
	for i, name := range []string{"head", "ack", "read"} {
		s, ok := v[i].(string)
		if !ok {
			return MemberCursors{}, fmt.Errorf("%w: sync answered %v", ErrCorruptValue, v)
		}
		ids[i] = -1
		if s != "" {
			if ids[i], err = parseMsgID(s); err != nil {
				return MemberCursors{}, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	c := MemberCursors{Head: ids[0], Ack: ids[1], Read: ids[2]}
	if c.Unread, c.UnreadExact, err = unreadResult(v[3:5], c.Read); err != nil {
		return MemberCursors{}, err
	}
	c.leaving, _ = v[5].(string)
	return c, nil
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

// CursorAsk names one group of a CursorStates call, with the replay mark
// its memberships are checked against (as CursorState's built).
type CursorAsk struct {
	Gid   string
	Built *Fence
}

// CursorStates returns uid's CursorState in each group of asks, read as
// CursorState reads one, all in one round trip (a cursors frame's
// groups). A group's error is its own: the others' answers stand.
func (r *Redis) CursorStates(ctx context.Context, uid string, asks []CursorAsk) ([]CursorState, []error) {
	if len(asks) == 1 { // in a round trip shared with other callers', as CursorState
		st, err := r.CursorState(ctx, asks[0].Gid, uid, asks[0].Built)
		return []CursorState{st}, []error{err}
	}
	qs := make([]*cursorQuery, len(asks))
	for i, a := range asks {
		qs[i] = &cursorQuery{gid: a.Gid, uid: uid, built: a.Built}
	}
	if len(qs) > 0 {
		roundTrip(ctx, r, qs)
	}
	sts, errs := make([]CursorState, len(qs)), make([]error, len(qs))
	for i, q := range qs {
		sts[i], errs[i] = q.st, q.err
	}
	return sts, errs
}
