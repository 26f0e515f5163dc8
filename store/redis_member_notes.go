package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrGroupFull says that joins would take a group past its limit of
// members (ReserveJoins).
var ErrGroupFull = errors.New("store: the group would pass its limit of members")

// FullError is ErrGroupFull with the counts it rests on.
type FullError struct {
	Gid     string
	Members int // joined, and joins reserved before and not yet projected
	Adding  int // the joins refused
	Limit   int
}

func (e *FullError) Error() string {
	return fmt.Sprintf("store: %s has %d members; adding %d would pass the limit of %d", e.Gid, e.Members, e.Adding, e.Limit)
}

func (e *FullError) Unwrap() error { return ErrGroupFull }

// reserveScript reserves places for joins in a group. KEYS: members,
// joining, leaves. ARGV: now and the reservations' expiry (unix ms), the limit,
// the number of members the caller counted elsewhere (known), their uids,
// then the uids to join. It returns {1, 0, fresh...} (fresh: 1 when this
// call reserved the uid, 0 when a reservation of it was held already or
// the uid is named twice), or {0, members} when the joins do not fit,
// reserving nothing.
//
// A reservation is a place until it expires or its uid reads as joined:
// once the member projector has the join, the member counts as joined and
// the reservation no more, so no place is counted twice, and a replay
// (which only brings the members hash back to what the log says) cannot
// count one twice either. A uid of the call whose membership reads as
// joined is counted once, as a join. A member whose leave is noted
// (MarkLeaving) but not yet projected counts as left: the leave frees its
// place as soon as it is written. The members are the projected joined
// ones, or known when more, and the reservations of uids neither joined
// nor known: a reservation known counts (its join written and read back
// by the caller) is no place of its own, judged on the reservations as
// they are when the joins are counted.
// HLEN, every member ever, bounds the joined ones: the members hash is
// walked only near the limit. The reservations of uids that read as joined
// are taken out as they are walked: kept until they expired (30 s), they
// made every add within that time after a group of 10,000 was created
// walk the 10,000 of them, 5 ms of Redis an add, and adding members one
// by one cost O(members²).
var reserveScript = redis.NewScript(`
local now, expiry, limit, known = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local vouched, first = {}, 5 + known
for i = 5, first - 1 do vouched[ARGV[i]] = true end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local leaves = {}
local notes = redis.call('HGETALL', KEYS[3])
for i = 1, #notes, 2 do
  local joined, exp = string.match(notes[i+1], '^(%-?%d+):(%d+)$')
  if joined and tonumber(exp) > now then leaves[notes[i]] = 'j:' .. joined end
end
local function member(uid, v)
  return v and string.sub(v, 1, 2) == 'j:' and leaves[uid] ~= v
end
local function joined(uid)
  return member(uid, redis.call('HGET', KEYS[1], uid))
end
local fresh, asked, add, rejoin = {}, {}, 0, 0
for i = first, #ARGV do
  local uid = ARGV[i]
  if asked[uid] or redis.call('ZSCORE', KEYS[2], uid) then
    fresh[#fresh+1] = 0
  else
    asked[uid] = true
    fresh[#fresh+1] = 1
    add = add + 1
    if joined(uid) then rejoin = rejoin + 1 end
  end
end
local function reserve()
  local out = {1, 0}
  for i = first, #ARGV do
    out[#out+1] = fresh[i-first+1]
    if fresh[i-first+1] == 1 then redis.call('ZADD', KEYS[2], expiry, ARGV[i]) end
  end
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if last[2] then redis.call('PEXPIREAT', KEYS[2], last[2]) end
  return out
end
if add == 0 then
  return reserve()
end
local held, gone = 0, {}
for _, uid in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if joined(uid) then
    gone[#gone+1] = uid
  elseif not vouched[uid] then
    held = held + 1
  end
end
for i = 1, #gone, 1000 do
  redis.call('ZREM', KEYS[2], unpack(gone, i, math.min(i + 999, #gone)))
end
local members = redis.call('HLEN', KEYS[1]) - rejoin
if math.max(members, known) + held + add > limit then
  members = -rejoin
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    if member(all[i], all[i+1]) then members = members + 1 end
  end
  members = math.max(members, known) + held
  if members + add > limit then
    return {0, members}
  end
end
return reserve()
`)

// ReserveJoins reserves, for ttl, a place in gid for a join of each of
// uids, the users the caller is about to join (not members, or members
// whose leave is written), and reports for each whether this call reserved
// it: false when a join of the uid was reserved already (being written by
// a call before, whose retry this may be: a second join would move the
// member's start forward and hide what was sent in between) or the uid is
// named twice. It reserves nothing and fails with a *FullError (Is
// ErrGroupFull) when the group's members and the joins would pass limit.
//
// The members counted are the joined ones the member projector has
// applied (or known, the caller's own members, when more: chatctl reads
// them from chat.members) and the reservations of neither, so two calls at
// once, or one within the projector's lag of another, cannot pass limit
// together. A reservation is held until its uid reads as joined (the
// projector has the join), it expires (a caller that crashed before
// writing the join), or ClearJoining or MarkLeaving drops it (the write
// failed, or the member is being removed). A leave frees a place once
// noted by MarkLeaving, or else once projected.
//
// The check costs a walk of the group's members only when HLEN, every
// member ever, is near limit.
func (r *Redis) ReserveJoins(ctx context.Context, gid string, uids []string, limit int, known map[string]bool, ttl time.Duration) ([]bool, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	// The script takes known whole: whether a reservation is one of known's
	// is judged on the reservations it counts, not on an earlier read.
	var counted []any
	for uid, ok := range known {
		if ok {
			counted = append(counted, uid)
		}
	}
	now := time.Now().UnixMilli()
	args := make([]any, 0, 4+len(counted)+len(uids))
	args = append(args, now, now+max(ttl.Milliseconds(), 1), limit, len(counted))
	args = append(args, counted...)
	for _, uid := range uids {
		args = append(args, uid)
	}
	res, err := reserveScript.Run(ctx, r.client, []string{membersKey(gid), joiningKey(gid), leavesKey(gid)}, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("store: reserve joins to %s: %w", gid, err)
	}
	switch {
	case len(res) == 2 && res[0] == 0:
		return nil, &FullError{Gid: gid, Members: int(res[1]), Adding: len(uids), Limit: limit}
	case len(res) != 2+len(uids) || res[0] != 1:
		return nil, fmt.Errorf("store: reserve joins to %s: %w: script returned %v", gid, ErrCorruptValue, res)
	}
	fresh := make([]bool, len(uids))
	for i := range fresh {
		fresh[i] = res[2+i] == 1
	}
	return fresh, nil
}

// Joining reports whether a join of uid to gid is reserved (ReserveJoins)
// and not expired or dropped since.
func (r *Redis) Joining(ctx context.Context, gid, uid string) (bool, error) {
	exp, err := r.client.ZScore(ctx, joiningKey(gid), uid).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: join of %s to %s: %w", uid, gid, err)
	}
	return int64(exp) > time.Now().UnixMilli(), nil
}

// extendScript moves the expiry of reservations still held to ARGV[1]
// (unix ms), and the key's with its last entry. KEYS: joining. ARGV: the
// expiry, then the uids. A reservation dropped or expired and taken out
// meanwhile stays out: its place may be another's now.
var extendScript = redis.NewScript(`
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i]) end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], last[2]) end
return 0
`)

// ExtendJoining holds the reservations of uids in gid (ReserveJoins) for
// ttl from now: a caller whose joins take long to write renews them, so
// that no place is lost before its join is written and projected.
func (r *Redis) ExtendJoining(ctx context.Context, gid string, uids []string, ttl time.Duration) error {
	if len(uids) == 0 {
		return nil
	}
	args := make([]any, 0, 1+len(uids))
	args = append(args, time.Now().Add(max(ttl, time.Millisecond)).UnixMilli())
	for _, uid := range uids {
		args = append(args, uid)
	}
	if err := extendScript.Run(ctx, r.client, []string{joiningKey(gid)}, args...).Err(); err != nil {
		return fmt.Errorf("store: hold joins to %s: %w", gid, err)
	}
	return nil
}

// ClearJoining drops reservations of ReserveJoins: the joins were not
// written, or the members are being removed, after which a join is a new
// one.
func (r *Redis) ClearJoining(ctx context.Context, gid string, uids ...string) error {
	if len(uids) == 0 {
		return nil
	}
	members := make([]any, len(uids))
	for i, uid := range uids {
		members[i] = uid
	}
	if err := r.client.ZRem(ctx, joiningKey(gid), members...).Err(); err != nil {
		return fmt.Errorf("store: clear joins to %s: %w", gid, err)
	}
	return nil
}

// leaveScript notes a leave written. KEYS: joining, leaving:<uid>,
// leaves, removing:<uid> (MarkRemoving's note, dropped). ARGV: uid, the note "<joinPos>:<leftPos>", joinPos, now and the
// note's hold (ms). It drops uid's reservation, sets the note for the
// hold, and puts the leave, "<joinPos>:<expiry>", in the group's leaves,
// whose key expires with its last entry. Once the leaves are more than
// twice those a walk of them kept last (field #kept, which no uid can be),
// and 16, it takes out those past their expiry (and any that does not
// parse): a group whose members keep leaving holds about the leaves
// within their hold, which every ReserveJoins reads, and a removal of
// thousands of members walks them a few times, not once a leave.
var leaveScript = redis.NewScript(`
local uid, now, hold = ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('ZREM', KEYS[1], uid)
redis.call('DEL', KEYS[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', hold)
local left = redis.call('PTTL', KEYS[3])
redis.call('HSET', KEYS[3], uid, ARGV[3] .. ':' .. (now + hold))
redis.call('PEXPIRE', KEYS[3], math.max(left, hold))
local kept = tonumber(redis.call('HGET', KEYS[3], '#kept')) or 0
if redis.call('HLEN', KEYS[3]) <= 2 * kept + 16 then
  return 0
end
kept = 0
local notes = redis.call('HGETALL', KEYS[3])
for i = 1, #notes, 2 do
  if notes[i] ~= '#kept' then
    local exp = tonumber(string.match(notes[i+1], '^%-?%d+:(%d+)$'))
    if not exp or exp <= now then
      redis.call('HDEL', KEYS[3], notes[i])
    else
      kept = kept + 1
    end
  end
end
redis.call('HSET', KEYS[3], '#kept', kept)
return 0
`)

// MarkLeaving notes, for ttl, that a leave of uid from gid was written,
// ending their stretch that began at joined at the group position pos, and
// drops the reservation of their join (ReserveJoins), after which a join is a new
// one, and drops the note of the removal that wrote it (MarkRemoving).
// Until the member projector has the leave, uid reads as a member from
// joined: an add of uid then is a join all the same, a second removal
// writes no second leave (Leaving), and a send is refused (BeginSend). A
// join written after the leave drops the note (ClearLeaving). The notes
// of the group's leaves past their ttl go with it, now and then.
func (r *Redis) MarkLeaving(ctx context.Context, gid, uid string, joined, pos int64, ttl time.Duration) error {
	keys := []string{joiningKey(gid), leavingKey(gid, uid), leavesKey(gid), removingKey(gid, uid)}
	join := strconv.FormatInt(joined, 10)
	err := leaveScript.Run(ctx, r.client, keys, uid, join+":"+strconv.FormatInt(pos, 10), join,
		time.Now().UnixMilli(), max(ttl.Milliseconds(), 1)).Err()
	if err != nil {
		return fmt.Errorf("store: mark the leave of %s from %s: %w", uid, gid, err)
	}
	return nil
}

// Leaving returns, of uids, those whose leave from gid MarkLeaving noted
// within its ttl, with the membership each leave makes.
func (r *Redis) Leaving(ctx context.Context, gid string, uids []string) (map[string]Membership, error) {
	out := make(map[string]Membership)
	if len(uids) == 0 {
		return out, nil
	}
	keys := make([]string, len(uids))
	for i, uid := range uids {
		keys[i] = leavingKey(gid, uid) // one slot: the keys of a group share its hash tag
	}
	vals, err := r.client.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("store: leaves from %s: %w", gid, err)
	}
	for i, v := range vals {
		if v == nil {
			continue
		}
		s, _ := v.(string)
		m, err := parseMembership("l:" + s)
		if err != nil {
			return nil, fmt.Errorf("store: leave of %s from %s: %w", uids[i], gid, err)
		}
		out[uids[i]] = m
	}
	return out, nil
}

// ClearLeaving drops the notes of MarkLeaving and MarkRemoving: a join was
// written after the leave (one at the same position would otherwise find
// the removal's note its own).
func (r *Redis) ClearLeaving(ctx context.Context, gid string, uids ...string) error {
	if len(uids) == 0 {
		return nil
	}
	keys := make([]string, 0, 2*len(uids))
	for _, uid := range uids {
		keys = append(keys, leavingKey(gid, uid), removingKey(gid, uid))
	}
	err := r.execPipe(ctx, func(p redis.Pipeliner) {
		p.Del(ctx, keys...) // one slot: the keys of a group share its hash tag
		p.HDel(ctx, leavesKey(gid), uids...)
	})
	if err != nil {
		return fmt.Errorf("store: clear leaves from %s: %w", gid, err)
	}
	return nil
}

// HoldJoins renews the reservations of uids in gid (ReserveJoins), and
// their places among their groups (ReserveGroups), every
// third of hold until the returned stop is called, so that joins slower
// to write than the hold (a slow broker, a group created with thousands of
// members, written one by one) keep their places: lost, another add would
// take one and pass the limit, and a retry of this add would write a
// second join. Stopped, they are held for hold more, for the member
// projector: stop waits for a renewal under way (one already sent to
// Redis ends within the client's read timeout: go-redis does not cut it
// short), then renews once more, after which nothing renews them. A
// failed renewal goes to warn.
func (r *Redis) HoldJoins(ctx context.Context, gid string, uids []string, hold time.Duration, warn func(error)) (stop func()) {
	if len(uids) == 0 {
		return func() {}
	}
	renewing, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(max(hold/3, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-renewing.Done():
				return
			case <-tick.C:
			}
			if err := r.extendHolds(renewing, gid, uids, hold); err != nil && renewing.Err() == nil {
				warn(err)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		if err := r.extendHolds(ctx, gid, uids, hold); err != nil {
			warn(err)
		}
	}
}

// extendHolds holds the places of uids' joins to gid for hold more: in the
// group (ReserveJoins) and among each user's groups (ReserveGroups).
func (r *Redis) extendHolds(ctx context.Context, gid string, uids []string, hold time.Duration) error {
	return errors.Join(r.ExtendJoining(ctx, gid, uids, hold), r.ExtendGroups(ctx, gid, uids, hold))
}
