package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// MemberState is where a user stands in a group.
type MemberState uint8

// The member states.
const (
	MemberNone   MemberState = iota // never joined (as far as the store knows)
	MemberJoined                    // a member now
	MemberLeft                      // was a member, left
)

func (s MemberState) String() string {
	switch s {
	case MemberNone:
		return "none"
	case MemberJoined:
		return "joined"
	case MemberLeft:
		return "left"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Membership is a user's membership of one group. JoinedAt and LeftAt are
// group positions (msgids): a member sees the messages with msgid >
// JoinedAt and, once left, <= LeftAt.
type Membership struct {
	State    MemberState
	JoinedAt int64
	LeftAt   int64 // only when State is MemberLeft
}

// Sees reports whether the membership covers message msgid.
func (m Membership) Sees(msgid int64) bool {
	switch m.State {
	case MemberJoined:
		return msgid > m.JoinedAt
	case MemberLeft:
		return msgid > m.JoinedAt && msgid <= m.LeftAt
	}
	return false
}

// Apply folds one member event into m, exactly as ApplyMembers does in
// Redis (membersScript): a join makes the user joined at Pos, whatever the
// state (a join while joined moves the join position); a leave while joined
// makes them left at Pos, keeping the join position; a leave while left
// changes nothing; a leave with no known join makes them left from the
// join the leave names (Joined) to Pos, or at Pos:Pos, which grants nothing,
// when it names none. A leaving changes nothing, but for a member not
// known, whom it makes joined at the join it names (compaction left only
// the leaving of a removal that never wrote its leave). An event of another
// op changes nothing (ApplyMembers refuses it). The event's gid and uid are
// not checked.
func (m Membership) Apply(ev schema.Member) Membership {
	switch {
	case ev.Op == schema.OpJoin:
		return Membership{State: MemberJoined, JoinedAt: ev.Pos}
	case ev.Op == schema.OpLeaving && m.State == MemberNone && ev.HasJoined:
		// All compaction left of a removal that never wrote its leave.
		return Membership{State: MemberJoined, JoinedAt: ev.Joined}
	case ev.Op != schema.OpLeave:
		return m
	case m.State == MemberJoined:
		return Membership{State: MemberLeft, JoinedAt: m.JoinedAt, LeftAt: ev.Pos}
	case m.State == MemberLeft:
		return m
	case ev.HasJoined:
		return Membership{State: MemberLeft, JoinedAt: ev.Joined, LeftAt: ev.Pos}
	}
	return Membership{State: MemberLeft, JoinedAt: ev.Pos, LeftAt: ev.Pos}
}

// encode is the stored form: "j:<joinPos>" or "l:<joinPos>:<leftPos>".
func (m Membership) encode() string {
	switch m.State {
	case MemberJoined:
		return "j:" + strconv.FormatInt(m.JoinedAt, 10)
	case MemberLeft:
		return "l:" + strconv.FormatInt(m.JoinedAt, 10) + ":" + strconv.FormatInt(m.LeftAt, 10)
	}
	return ""
}

func parseMembership(s string) (Membership, error) {
	state, rest, _ := strings.Cut(s, ":")
	var m Membership
	var err error
	switch state {
	case "j":
		m.State = MemberJoined
		m.JoinedAt, err = strconv.ParseInt(rest, 10, 64)
	case "l":
		m.State = MemberLeft
		j, l, ok := strings.Cut(rest, ":")
		if !ok {
			return Membership{}, fmt.Errorf("%w: membership %q", ErrCorruptValue, s)
		}
		if m.JoinedAt, err = strconv.ParseInt(j, 10, 64); err == nil {
			m.LeftAt, err = strconv.ParseInt(l, 10, 64)
		}
	default:
		return Membership{}, fmt.Errorf("%w: membership %q", ErrCorruptValue, s)
	}
	if err != nil {
		return Membership{}, fmt.Errorf("%w: membership %q", ErrCorruptValue, s)
	}
	return m, nil
}

// membersScript folds one group's member events in order. KEYS: members,
// ack, read, members-at. ARGV: the offset from which events may be replays,
// then uid, op ("j" or "l"), pos, joined ("" when the event names no join)
// and offset in chat.members ("" when not known) of each event. It returns
// uid, new value, ... for every uid it touched, for the user index.
//
// join: joined at pos (whatever the state: the last join wins, as in the
// compacted topic), ack and read cursors raised to pos; leave on joined:
// left at pos, join kept; leave on left: nothing (a second leave must not
// show what was sent after the first); leave on none (the join was
// compacted away): left at pos, joined where the leave says, or at pos,
// which grants nothing, when it does not say. It reads a stored value's
// join position as parseMembership does, a "+" sign too: a value it could
// not read would be taken as no membership, and a leave would then make a
// member left long ago left over the stretch the leave names.
//
// An event from the replay offset on, at or below the offset members-at
// holds for its uid, was applied before: it is skipped. Without that, a replay after a crash between
// effect and commit would fold the member's earlier events again, and a
// replay batch that ends between a join and the leave after it would show a
// member who left as joined until the next batch.
//
// The result of a sequence depends only on its events from the last join
// on, so replaying any suffix of it, on the state it produced, gives the
// same state: that is what a consumer does after a crash.
var membersScript = redis.NewScript(`
local vals, order, at, moved = {}, {}, {}, {}
local replays = tonumber(ARGV[1])
for i = 2, #ARGV, 5 do
  local uid, op, pos, from, off = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], tonumber(ARGV[i+4])
  local cur = vals[uid]
  if cur == nil then
    cur = redis.call('HGET', KEYS[1], uid) or ''
    order[#order+1] = uid
    at[uid] = tonumber(redis.call('HGET', KEYS[4], uid) or '')
  end
  if off and off >= replays and at[uid] and off <= at[uid] then
    -- applied before: a replay
  else
    if off then
      at[uid], moved[uid] = off, true
    end
    local state, joined = string.match(cur, '^(%a):([%+%-]?%d+)')
    if op == 'j' or (op == 'g' and cur == '' and from ~= '') then
      if op == 'g' then pos = from end
      cur = 'j:' .. pos
      redis.call('ZADD', KEYS[2], 'GT', pos, uid)
      redis.call('ZADD', KEYS[3], 'GT', pos, uid)
    elseif op == 'g' then
      -- a leaving of a known member changes nothing
    elseif state == 'j' then
      cur = 'l:' .. joined .. ':' .. pos
    elseif state ~= 'l' then
      if from == '' then from = pos end
      cur = 'l:' .. from .. ':' .. pos
    end
  end
  vals[uid] = cur
end
local out = {}
for _, uid in ipairs(order) do
  if vals[uid] ~= '' then
    redis.call('HSET', KEYS[1], uid, vals[uid])
    out[#out+1] = uid
    out[#out+1] = vals[uid]
  end
  if moved[uid] then
    redis.call('HSET', KEYS[4], uid, string.format('%d', at[uid]))
  end
end
return out
`)

// ApplyMembers folds member events, in order: a join makes the user a
// member at Pos and raises their ack and read cursors to Pos (a joiner
// starts at the group's head); a leave makes them left at Pos, keeping the
// join position (or taking the leave's Joined when the join is not known);
// a join after a leave makes them a member at the new Pos; a leaving
// changes nothing but for a member not known (see Membership.Apply).
// A leave while left changes nothing. A join while joined moves the join
// position to the new Pos, so producers must not re-join a member.
//
// Replaying the same events in the same order, or any suffix of them, gives
// the same state. It writes the group's member hash and the users' group
// index, with its count of groups joined: one script call per group, then
// one per user, each step pipelined.
func (r *Redis) ApplyMembers(ctx context.Context, ms []schema.Member) error {
	return r.ApplyMembersAt(ctx, ms, nil, 0)
}

// ApplyMembersAt is ApplyMembers of events read from chat.members, with
// their offsets (offsets[i] is ms[i]'s; nil: none known). It keeps each
// member's last offset applied and skips the events from replays on that
// are at or below it, so that a replay, cut into batches anywhere, never
// shows a member as they stood before an event already applied (a member
// who left as joined). Events below replays are applied whatever: a log
// cut back or recreated gives old offsets to new events.
func (r *Redis) ApplyMembersAt(ctx context.Context, ms []schema.Member, offsets []int64, replays int64) error {
	if offsets != nil && len(offsets) != len(ms) {
		return fmt.Errorf("store: apply members: %d offsets for %d events", len(offsets), len(ms))
	}
	groups := groupIndexes(len(ms), func(i int) (string, bool) { return ms[i].Gid, true })
	calls := make([]scriptCall, len(groups))
	for g, idx := range groups {
		args := make([]any, 1, 1+5*len(idx))
		args[0] = replays
		for _, i := range idx {
			op, from, off := "l", "", ""
			if ms[i].Op == schema.OpLeaving {
				op = "g"
			} else if ms[i].Op == schema.OpJoin {
				op = "j"
			} else if ms[i].Op != schema.OpLeave {
				return fmt.Errorf("store: apply members: %v of %q in %q: unknown op", ms[i].Op, ms[i].Uid, ms[i].Gid)
			}
			if ms[i].HasJoined {
				from = strconv.FormatInt(ms[i].Joined, 10)
			}
			if offsets != nil {
				off = strconv.FormatInt(offsets[i], 10)
			}
			args = append(args, ms[i].Uid, op, ms[i].Pos, from, off)
		}
		gid := ms[idx[0]].Gid
		calls[g] = scriptCall{keys: []string{membersKey(gid), ackKey(gid), readKey(gid), memberOffsetsKey(gid)}, args: args}
	}
	cmds, err := r.runScript(ctx, membersScript, calls)
	if err != nil {
		return fmt.Errorf("store: apply members: %w", err)
	}

	// The user index: uid -> gid -> value, one HSET per user.
	users := make(map[string][]any)
	for g, idx := range groups {
		gid := ms[idx[0]].Gid
		out, err := cmds[g].StringSlice()
		if err != nil || len(out)%2 != 0 {
			return fmt.Errorf("store: apply members: %w: script returned %v (%v)", ErrCorruptValue, cmds[g].Val(), err)
		}
		for k := 0; k < len(out); k += 2 {
			users[out[k]] = append(users[out[k]], gid, out[k+1])
		}
	}
	if err := r.writeUserIndexes(ctx, users); err != nil {
		return fmt.Errorf("store: apply members: user index: %w", err)
	}
	return nil
}

// Membership returns the user's membership of the group, with a leave
// noted by MarkLeaving taken as projected.
//
// When built is not nil (the member projector's partition of gid), the
// read is checked in the same round trip against its replay mark and fails
// with ErrReplaying while the projector rebuilds the memberships (Redis
// lost its data): a member who left reads as joined between their join and
// their leave in the replay.
func (r *Redis) Membership(ctx context.Context, gid, uid string, built *Fence) (Membership, error) {
	var (
		marked          *redis.BoolCmd
		member, leaving *redis.StringCmd
	)
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		marked = built.checkReplayed(ctx, p)
		member = p.HGet(ctx, membersKey(gid), uid)
		leaving = p.Get(ctx, leavingKey(gid, uid))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Membership{}, fmt.Errorf("store: membership of %q in %q: %w", uid, gid, err)
	}
	if err := built.replayed(marked); err != nil {
		return Membership{}, err
	}
	if errors.Is(member.Err(), redis.Nil) {
		return Membership{State: MemberNone}, nil
	}
	m, err := parseMembership(member.Val())
	if err != nil {
		return Membership{}, fmt.Errorf("store: membership of %q in %q: %w", uid, gid, err)
	}
	return m.withLeave(leaving.Val()), nil
}

// withLeave returns m with the leave noted by MarkLeaving ("<joinPos>:
// <leftPos>", or "" for none) taken as projected, if it ends m's stretch.
func (m Membership) withLeave(note string) Membership {
	if note == "" || m.State != MemberJoined {
		return m
	}
	l, err := parseMembership("l:" + note)
	if err != nil || l.JoinedAt != m.JoinedAt {
		return m
	}
	return l
}

// JoinRef names a join: uid joined gid at position Pos.
type JoinRef struct {
	Gid, Uid string
	Pos      int64
}

// JoinsProjected reports, for each join, whether the member projection
// holds it (or a later join of the member), in one round trip.
func (r *Redis) JoinsProjected(ctx context.Context, joins []JoinRef) ([]bool, error) {
	if len(joins) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StringCmd, len(joins))
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, j := range joins {
			cmds[i] = p.HGet(ctx, membersKey(j.Gid), j.Uid)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: joins projected: %w", err)
	}
	out := make([]bool, len(joins))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil {
			continue // absent: not yet
		}
		m, err := parseMembership(v)
		out[i] = err == nil && m.State != MemberNone && m.JoinedAt >= joins[i].Pos
	}
	return out, nil
}

// Members returns every user who ever joined the group (left ones too), by
// uid.
func (r *Redis) Members(ctx context.Context, gid string) (map[string]Membership, error) {
	all, err := r.memberships(ctx, membersKey(gid))
	if err != nil {
		return nil, fmt.Errorf("store: members of %q: %w", gid, err)
	}
	return all, nil
}

// MembershipsOf returns the memberships of uids in the group (left ones
// too; absent: never joined), in one round trip that reads those uids
// only: an add to a group of 10,000 members reads the one it adds.
func (r *Redis) MembershipsOf(ctx context.Context, gid string, uids []string) (map[string]Membership, error) {
	out := make(map[string]Membership, len(uids))
	if len(uids) == 0 {
		return out, nil
	}
	vals, err := r.client.HMGet(ctx, membersKey(gid), uids...).Result()
	if err != nil {
		return nil, fmt.Errorf("store: members of %q: %w", gid, err)
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // nil: never joined
		}
		m, err := parseMembership(s)
		if err != nil {
			return nil, fmt.Errorf("store: membership of %q in %q: %w", uids[i], gid, err)
		}
		out[uids[i]] = m
	}
	return out, nil
}

// GroupKnown reports whether gid has had a member: one the member
// projector applied (joined or left since), or a join reserved
// (ReserveJoins) and not expired or dropped, which a group just created
// has before the projector applies it.
func (r *Redis) GroupKnown(ctx context.Context, gid string) (bool, error) {
	pipe := r.client.Pipeline()
	members := pipe.Exists(ctx, membersKey(gid))
	joining := pipe.ZCount(ctx, joiningKey(gid), "("+strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf")
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("store: members of %q: %w", gid, err)
	}
	return members.Val() > 0 || joining.Val() > 0, nil
}

// UserGroups returns the user's memberships (left ones too), by gid.
func (r *Redis) UserGroups(ctx context.Context, uid string) (map[string]Membership, error) {
	all, err := r.memberships(ctx, userGroupsKey(uid))
	if err != nil {
		return nil, fmt.Errorf("store: groups of %q: %w", uid, err)
	}
	return all, nil
}

func (r *Redis) memberships(ctx context.Context, key string) (map[string]Membership, error) {
	h, err := r.client.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	return parseMemberships(h)
}

// parseMemberships reads a member hash or a user index, skipping the
// index's count (joinedField).
func parseMemberships(h map[string]string) (map[string]Membership, error) {
	all := make(map[string]Membership, len(h))
	for k, v := range h {
		if k == joinedField {
			continue
		}
		m, err := parseMembership(v)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		all[k] = m
	}
	return all, nil
}
