package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The user index (chat:{u:uid}:groups) holds, beside the memberships by
// gid, the number of groups the user is a member of now: field joinedField,
// kept by the member projector with each write of the index (userIndexScript),
// so that the limit of groups a user may be in is checked with one field
// read, not a read of every group ever joined. Ids have no "#", so the
// field is no gid; memberships skips it.

// joinedField is the user index's count of the groups joined now.
const joinedField = "#joined"

// countJoined is the Lua that sets n, the number of joined values of the
// index KEYS[1], counting them (counted) when the index has no count yet
// (one written before the count was kept), which the scripts then write.
const countJoined = `
local n = tonumber(redis.call('HGET', KEYS[1], '#joined') or '')
local counted = not n
if counted then
  n = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
    if string.sub(v, 1, 2) == 'j:' then n = n + 1 end
  end
end
`

// userIndexScript writes memberships into one user's index and keeps its
// count of groups joined. KEYS: the index, the user's reservations of
// groups (ReserveGroups). ARGV: gid, value, ... It counts the change of
// state of each gid, so writing a value again (a replay) changes nothing,
// and drops the user's reservation of each gid: its join is applied.
var userIndexScript = redis.NewScript(countJoined + `
for i = 1, #ARGV, 2 do
  local old = redis.call('HGET', KEYS[1], ARGV[i]) or ''
  local was, is = string.sub(old, 1, 2) == 'j:', string.sub(ARGV[i+1], 1, 2) == 'j:'
  if was and not is then n = n - 1 elseif is and not was then n = n + 1 end
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1])
  redis.call('ZREM', KEYS[2], ARGV[i])
end
redis.call('HSET', KEYS[1], '#joined', n)
return n
`)

// userJoiningKey is the user's reservations of places among their groups
// (ReserveGroups): ZSET, member gid, score expiry (unix ms); the key
// expires with its last entry.
func userJoiningKey(uid string) string { return "chat:{u:" + uid + "}:joining" }

// reserveGroupScript reserves a place among one user's groups for a join
// to a group. KEYS: the user index, the user's reservations. ARGV: gid,
// the limit, now and the expiry (unix ms). It answers {1, count} when it
// reserved, {2, count} when gid was reserved already (by another add of
// the user to gid: its place is counted once), {0, count} when the user's
// groups, joined or reserved, are at the limit already; count is them.
var reserveGroupScript = redis.NewScript(countJoined + `
local gid, limit, now, exp = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if counted and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], '#joined', n) end
local had = redis.call('ZSCORE', KEYS[2], gid)
for _, g in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if g ~= gid and string.sub(redis.call('HGET', KEYS[1], g) or '', 1, 2) ~= 'j:' then n = n + 1 end
end
if n >= limit then return {0, n} end
redis.call('ZADD', KEYS[2], exp, gid)
if redis.call('PTTL', KEYS[2]) < exp - now then redis.call('PEXPIRE', KEYS[2], exp - now) end
if had then return {2, n} end
return {1, n}
`)

// ReserveGroups reserves, for each of uids, a place among their groups
// for a join to gid about to be written, held for hold unless the member
// projector applies the join first: an add of the user meanwhile, here or
// through another gateway or chatctl, counts it. It reserves for all of
// uids or none: when one of them is in limit groups already, joined or
// reserved, it drops what it reserved and returns those at the limit as
// full. held lists the uids this call reserved (ClearGroups drops them,
// for joins not written).
func (r *Redis) ReserveGroups(ctx context.Context, gid string, uids []string, limit int, hold time.Duration) (held, full []string, err error) {
	now := time.Now().UnixMilli()
	calls := make([]scriptCall, len(uids))
	for i, uid := range uids {
		calls[i] = scriptCall{keys: []string{userGroupsKey(uid), userJoiningKey(uid)}, args: []any{gid, limit, now, now + hold.Milliseconds()}}
	}
	cmds, err := r.runScript(ctx, reserveGroupScript, calls)
	for i, c := range cmds {
		v, cerr := c.Int64Slice()
		switch {
		case cerr != nil:
			err = errors.Join(err, cerr)
		case len(v) != 2:
			err = errors.Join(err, fmt.Errorf("%w: reserve answered %v", ErrCorruptValue, v))
		case v[0] == 0:
			full = append(full, uids[i])
		case v[0] == 1:
			held = append(held, uids[i])
		}
	}
	if err != nil || len(full) > 0 {
		if cerr := r.ClearGroups(context.WithoutCancel(ctx), gid, held...); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("store: reserve places among the groups of users: %w", err)
		}
		return nil, full, nil
	}
	return held, nil, nil
}

// extendGroupScript holds a reservation of ReserveGroups longer, if it is
// still there. KEYS: the user's reservations. ARGV: gid, now and the new
// expiry (unix ms).
var extendGroupScript = redis.NewScript(`
local exp = tonumber(ARGV[3])
if redis.call('ZADD', KEYS[1], 'XX', 'GT', 'CH', exp, ARGV[1]) == 1 and redis.call('PTTL', KEYS[1]) < exp - tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], exp - tonumber(ARGV[2]))
end
return 0
`)

// ExtendGroups holds the reservations (ReserveGroups) of a place in gid
// among the groups of each of uids for ttl from now, those still held:
// joins written longer than the hold keep their places (HoldJoins).
func (r *Redis) ExtendGroups(ctx context.Context, gid string, uids []string, ttl time.Duration) error {
	now := time.Now().UnixMilli()
	calls := make([]scriptCall, len(uids))
	for i, uid := range uids {
		calls[i] = scriptCall{keys: []string{userJoiningKey(uid)}, args: []any{gid, now, now + max(ttl, time.Millisecond).Milliseconds()}}
	}
	cmds, err := r.runScript(ctx, extendGroupScript, calls)
	for _, c := range cmds {
		err = errors.Join(err, c.Err())
	}
	if err != nil {
		return fmt.Errorf("store: hold places among the groups of users for %s: %w", gid, err)
	}
	return nil
}

// ClearGroups drops the reservations (ReserveGroups) of a place in gid
// among the groups of each of uids: joins not written.
func (r *Redis) ClearGroups(ctx context.Context, gid string, uids ...string) error {
	if len(uids) == 0 {
		return nil
	}
	err := r.execPipe(ctx, func(p redis.Pipeliner) {
		for _, uid := range uids {
			p.ZRem(ctx, userJoiningKey(uid), gid)
		}
	})
	if err != nil {
		return fmt.Errorf("store: clear reservations of %s: %w", gid, err)
	}
	return nil
}

// groupCountScript answers the number of groups of one user's index
// KEYS[1] joined now, writing the count when the index had none.
var groupCountScript = redis.NewScript(countJoined + `
if counted and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], '#joined', n) end
return n
`)

// writeUserIndexes writes the memberships of users (uid -> gid, value,
// ...) into their indexes, one script a user, pipelined.
func (r *Redis) writeUserIndexes(ctx context.Context, users map[string][]any) error {
	calls := make([]scriptCall, 0, len(users))
	for uid, fields := range users {
		calls = append(calls, scriptCall{keys: []string{userGroupsKey(uid), userJoiningKey(uid)}, args: fields})
	}
	cmds, err := r.runScript(ctx, userIndexScript, calls)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

// GroupCounts returns how many groups each of uids is a member of now, as
// the member projector has applied their joins and leaves (not counting
// joins written and not yet projected), in one round trip.
func (r *Redis) GroupCounts(ctx context.Context, uids []string) ([]int64, error) {
	calls := make([]scriptCall, len(uids))
	for i, uid := range uids {
		calls[i] = scriptCall{keys: []string{userGroupsKey(uid)}}
	}
	cmds, err := r.runScript(ctx, groupCountScript, calls)
	if err != nil {
		return nil, fmt.Errorf("store: groups of users: %w", err)
	}
	out := make([]int64, len(uids))
	for i, c := range cmds {
		if out[i], err = c.Int64(); err != nil {
			return nil, fmt.Errorf("store: groups of %q: %w", uids[i], err)
		}
	}
	return out, nil
}

// LeftNote is what a sync noted of a group the user left: the stretch of
// membership it is about, and until when the sync lists the group (unix
// ms); Until 0: no longer (every message before the leave was acked and
// read). A note of another stretch than the user's last is void.
type LeftNote struct {
	JoinedAt, LeftAt int64
	Until            int64
}

// About reports whether n is a note of m's stretch.
func (n LeftNote) About(m Membership) bool {
	return m.State == MemberLeft && n.JoinedAt == m.JoinedAt && n.LeftAt == m.LeftAt
}

// leftNotesKey is the user's notes of groups left: gid -> "<joinPos>:
// <leftPos>:<until>" (LeftNote). Not part of the member projection: a
// rebuild of it leaves the notes, which name the stretch they are about.
func leftNotesKey(uid string) string { return "chat:{u:" + uid + "}:left" }

// SyncGroups returns the user's memberships (left ones too), by gid, as
// UserGroups does, and the notes of groups left (NoteLeft), in one round
// trip.
func (r *Redis) SyncGroups(ctx context.Context, uid string) (map[string]Membership, map[string]LeftNote, error) {
	var groups, notes *redis.MapStringStringCmd
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		groups = p.HGetAll(ctx, userGroupsKey(uid))
		notes = p.HGetAll(ctx, leftNotesKey(uid))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("store: groups of %q: %w", uid, err)
	}
	all, err := parseMemberships(groups.Val())
	if err != nil {
		return nil, nil, fmt.Errorf("store: groups of %q: %w", uid, err)
	}
	out := make(map[string]LeftNote, len(notes.Val()))
	for gid, v := range notes.Val() {
		if n, ok := parseLeftNote(v); ok {
			out[gid] = n
		} // an unreadable note is none: the group is listed, and noted again
	}
	return all, out, nil
}

// NoteLeft writes notes of groups the user left, by gid.
func (r *Redis) NoteLeft(ctx context.Context, uid string, notes map[string]LeftNote) error {
	if len(notes) == 0 {
		return nil
	}
	fields := make([]any, 0, 2*len(notes))
	for gid, n := range notes {
		fields = append(fields, gid, strconv.FormatInt(n.JoinedAt, 10)+":"+strconv.FormatInt(n.LeftAt, 10)+":"+strconv.FormatInt(n.Until, 10))
	}
	if err := r.client.HSet(ctx, leftNotesKey(uid), fields...).Err(); err != nil {
		return fmt.Errorf("store: notes of groups %q left: %w", uid, err)
	}
	return nil
}

func parseLeftNote(s string) (LeftNote, bool) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return LeftNote{}, false
	}
	var v [3]int64
	for i := range f {
		var err error
		if v[i], err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return LeftNote{}, false
		}
	}
	return LeftNote{JoinedAt: v[0], LeftAt: v[1], Until: v[2]}, true
}
