package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// appendScript adds messages to one group's window. KEYS: win, floor, head.
// ARGV: window size (-1: unbounded), pre-trimmed floor (the highest msgid the
// caller left out because it would be trimmed at once, or -1), the batch's
// highest msgid, then msgid and member of each message.
//
// Messages at or below the floor are skipped, so a replay changes nothing.
// Trimming raises the floor to the highest msgid trimmed. ZADD goes in
// chunks to stay below Lua's unpack limit.
var appendScript = redis.NewScript(luaNum + `
local size, pre, top = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local got = redis.call('MGET', KEYS[2], KEYS[3])
local floor, head = num(got[1] or '-1'), num(got[2] or '-1')
local newfloor = nil
if pre > floor then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
  floor, newfloor = pre, ARGV[2]
end
local batch = {}
for i = 4, #ARGV, 2 do
  if tonumber(ARGV[i]) > floor then
    batch[#batch+1] = ARGV[i]
    batch[#batch+1] = ARGV[i+1]
    if #batch >= 1000 then
      redis.call('ZADD', KEYS[1], unpack(batch))
      batch = {}
    end
  end
end
if #batch > 0 then
  redis.call('ZADD', KEYS[1], unpack(batch))
end
if size >= 0 then
  -- the newest entry to trim, if the window holds more than size
  local edge = redis.call('ZRANGE', KEYS[1], -size-1, -size-1, 'WITHSCORES')
  if #edge > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -size-1)
    newfloor = string.format('%.0f', num(edge[2]))
  end
end
` + luaRaiseFloorAndHead)

// luaNum defines num, which reads a number the way tonumber does, and also
// a whole one in the exponent form some servers write a score in: an
// embedded Redis (miniredis) writes 10^8 as "1e+8", which its Lua's
// tonumber does not read (it reads "1.5e+9"). Scripts that read a floor or
// a cursor, which come from scores, read them with it; floors are written
// as plain integers. The mantissa is scaled, not written out with its
// zeros: a stored "1e+999999999" would have the script build a string of
// a gigabyte. Exact for every whole number up to 2^53 (10^e is exact up
// to 10^22); past 10^308 it is inf, as Redis's own tonumber reads it.
const luaNum = `
local function num(s)
  local n = tonumber(s)
  if n or type(s) ~= 'string' then return n end
  local m, e = string.match(s, '^(%-?%d+)[eE]%+?(%d+)$')
  if m then
    n = tonumber(m)
    if n == 0 then return n end
    return n * 10 ^ tonumber(e)
  end
  return nil
end
`

// luaRaiseFloorAndHead ends both window scripts: it stores the new floor
// (newfloor, when trimming happened) if it is above the stored one (got[1])
// and raises the head to top (ARGV[3]). Trimming can find only messages
// below the floor to drop when a writer stalled between reading the floor
// and its ZADD (an old owner of the partition, resumed after the new one
// appended past its batch): lowering the floor to them would make the
// window claim what was trimmed long ago.
const luaRaiseFloorAndHead = `
local set = {}
if newfloor and tonumber(newfloor) > num(got[1] or '-1') then
  set[#set+1] = KEYS[2]
  set[#set+1] = newfloor
end
if top > head then
  set[#set+1] = KEYS[3]
  set[#set+1] = ARGV[3]
end
if #set > 0 then
  redis.call('MSET', unpack(set))
end
return 1
`

// trimScript finishes one group's append after a plain ZADD of its
// messages (all above the floor). KEYS: win, floor, head. ARGV: window size
// (-1: unbounded), pre-trimmed floor (as in appendScript), the batch's
// highest msgid. It drops what the caller pre-trimmed, trims the window to
// its size (raising the floor to the highest msgid trimmed) and raises the
// head.
var trimScript = redis.NewScript(luaNum + `
local size, pre, top = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local got = redis.call('MGET', KEYS[2], KEYS[3])
local floor, head = num(got[1] or '-1'), num(got[2] or '-1')
local newfloor = nil
if pre > floor then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
  newfloor = ARGV[2]
end
if size >= 0 then
  local n = redis.call('ZCARD', KEYS[1])
  if n > size then
    local edge = redis.call('ZRANGE', KEYS[1], n-size-1, n-size-1, 'WITHSCORES')
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n-size-1)
    newfloor = string.format('%.0f', num(edge[2]))
  end
end
` + luaRaiseFloorAndHead)

// AppendWindow adds messages to their groups' windows, trims each window to
// WindowSize (raising its floor to the highest msgid trimmed) and raises
// each group's head. Pass only the messages ClaimSends did not find to be
// duplicates. It is idempotent: re-appending messages that are present or
// already trimmed (msgid <= floor) changes nothing.
//
// It costs two round trips: the floors of the batch's groups, then, per
// group, a plain ZADD and trimScript when every message is above the floor
// and the floor need not rise before them (the rule), or appendScript,
// which skips those at or below it (a replay of trimmed messages) and
// raises the floor in the same step (a group with more messages in the
// batch than the window holds, or a window rebuilt over older history),
// all pipelined. A reader between the ZADD and the trim sees more than
// WindowSize messages, all above the floor, which is as complete as the
// window ever is.
//
// With a fence (the persister's), it writes nothing when the fence is gone,
// and checks it again once written: if Redis lost its data meanwhile, it
// deletes what it wrote. Either way it returns ErrStateLost.
func (r *Redis) AppendWindow(ctx context.Context, fence *Fence, msgs []schema.Message) error {
	return r.AppendWindowOver(ctx, fence, msgs, nil)
}

// AppendWindowOver is AppendWindow over history that the window may never
// have held: a group whose window has no floor and holds nothing below
// the group's first message in msgs is given the floor older finds for it
// (nil: none is looked for; see OlderFloors).
func (r *Redis) AppendWindowOver(ctx context.Context, fence *Fence, msgs []schema.Message, older OlderFloors) error {
	groups := groupIndexes(len(msgs), func(i int) (string, bool) { return msgs[i].Gid, true })
	if len(groups) == 0 {
		return nil
	}
	floors, lowest, heads, sized, err := r.floors(ctx, fence, msgs, groups, older != nil)
	if err != nil {
		return fmt.Errorf("store: append window: %w", err)
	}
	raise, err := olderFloors(ctx, msgs, groups, floors, lowest, older)
	if err != nil {
		return fmt.Errorf("store: append window: %w", err)
	}
	if err := r.appendWindow(ctx, msgs, groups, floors, raise, heads, sized); err != nil {
		return err
	}
	if err := r.verify(ctx, fence); err != nil {
		if errors.Is(err, ErrStateLost) {
			keys := make([]string, 0, 3*len(groups))
			for _, idx := range groups {
				gid := msgs[idx[0]].Gid
				keys = append(keys, windowKey(gid), floorKey(gid), headKey(gid), sizeKey(gid))
			}
			if uerr := r.undo(ctx, keys); uerr != nil {
				return fmt.Errorf("store: append window: %w; deleting what went into the wiped Redis failed: %v", err, uerr)
			}
		}
		return fmt.Errorf("store: append window: %w", err)
	}
	return nil
}

// appendWindow writes the batch, given the floors and heads of its groups,
// whether their size records account for every member up to the head
// (sized), and the floor to give each (raise, nil or -1: none) besides
// what trimming sets.
func (r *Redis) appendWindow(ctx context.Context, msgs []schema.Message, groups [][]int, floors, raise, heads []int64, sized []bool) error {
	// One buffer for every member: 8-byte big-endian msgid ++ encoding.
	size := 0
	for i := range msgs {
		size += 8 + 16 + len(msgs[i].Gid) + len(msgs[i].Sender) + len(msgs[i].ClientMsgID) + len(msgs[i].Body) + 3*binary.MaxVarintLen64
	}
	buf := make([]byte, 0, size)
	ends := make([]int, len(msgs))
	for i := range msgs {
		buf = binary.BigEndian.AppendUint64(buf, uint64(msgs[i].MsgID))
		buf = schema.AppendMessage(buf, &msgs[i])
		ends[i] = len(buf)
	}
	member := func(i int) []byte {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		return buf[start:ends[i]:ends[i]]
	}

	var trims, appends []scriptCall
	var zadds, trimCmds []*redis.Cmd
	var notes []*redis.Cmd
	zargs := make([]any, 0, 2*len(msgs)+2*len(groups))
	pipe := r.client.Pipeline()
	for g, idx := range groups {
		pre, keep := r.pretrim(msgs, idx)
		if raise != nil {
			pre = max(pre, raise[g])
		}
		head, low, largest := int64(-1), int64(math.MaxInt64), 0
		for _, i := range idx {
			head = max(head, msgs[i].MsgID)
		}
		for _, i := range keep {
			low, largest = min(low, msgs[i].MsgID), max(largest, len(member(i)))
		}
		gid := msgs[idx[0]].Gid
		keys := []string{windowKey(gid), floorKey(gid), headKey(gid)}
		if len(keep) > 0 {
			notes = append(notes, noteSizes(ctx, pipe, gid, largest, heads[g], head, sized[g]))
		}
		// A floor that must rise first goes with the messages in one step:
		// between a ZADD and its trim, a reader would see the window run on
		// from its old floor over the hole below the new one.
		if low <= floors[g] || pre >= 0 {
			args := make([]any, 0, 3+2*len(keep))
			args = append(args, r.cfg.WindowSize, pre, head)
			for _, i := range keep {
				args = append(args, msgs[i].MsgID, member(i))
			}
			appends = append(appends, scriptCall{keys: keys, args: args})
			continue
		}
		from := len(zargs)
		zargs = append(zargs, "zadd", keys[0])
		for _, i := range keep {
			zargs = append(zargs, msgs[i].MsgID, member(i))
		}
		zadds = append(zadds, pipe.Do(ctx, zargs[from:len(zargs):len(zargs)]...))
		trim := scriptCall{keys: keys, args: []any{r.cfg.WindowSize, pre, head}}
		trims = append(trims, trim)
		trimCmds = append(trimCmds, trimScript.EvalSha(ctx, pipe, trim.keys, trim.args...))
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(ctx) // errors are read per command
	}
	for _, cmd := range zadds {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("store: append window: %w", err)
		}
	}
	for _, cmd := range notes {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("store: append window: size record: %w", err)
		}
	}
	// Trims whose script the server did not know go again, after the ZADDs.
	var again []scriptCall
	for j, cmd := range trimCmds {
		switch err := cmd.Err(); {
		case isNoScript(err):
			again = append(again, trims[j])
		case err != nil:
			return fmt.Errorf("store: append window: %w", err)
		}
	}
	if _, err := r.runScript(ctx, trimScript, again); err != nil {
		return fmt.Errorf("store: append window: %w", err)
	}
	if _, err := r.runScript(ctx, appendScript, appends); err != nil {
		return fmt.Errorf("store: append window: %w", err)
	}
	return nil
}

// floors returns the floor and the head of each group (-1: nothing
// trimmed, none), one MGET per group, pipelined with the fence's check,
// and whether the group's size record accounts for every member up to
// its head (see noteSizes); with withLowest, also the lowest msgid in
// each group's window (-1: empty).
func (r *Redis) floors(ctx context.Context, fence *Fence, msgs []schema.Message, groups [][]int, withLowest bool) (floors, lowest, heads []int64, sized []bool, err error) {
	cmds := make([]*redis.SliceCmd, len(groups))
	uptos := make([]*redis.FloatCmd, len(groups))
	var lows []*redis.ZSliceCmd
	var fenced *redis.BoolCmd
	err = r.execPipe(ctx, func(p redis.Pipeliner) {
		fenced = fence.check(ctx, p)
		for g, idx := range groups {
			gid := msgs[idx[0]].Gid
			cmds[g] = p.MGet(ctx, floorKey(gid), headKey(gid))
			uptos[g] = p.ZScore(ctx, sizeKey(gid), "upto")
			if withLowest {
				lows = append(lows, p.ZRangeWithScores(ctx, windowKey(gid), 0, 0))
			}
		}
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if err := fence.held(fenced); err != nil {
		return nil, nil, nil, nil, err
	}
	floors, heads = make([]int64, len(groups)), make([]int64, len(groups))
	for g, cmd := range cmds {
		for i, name := range []string{"floor", "head"} {
			id := int64(-1)
			if v := cmd.Val(); len(v) == 2 && v[i] != nil {
				s, _ := v[i].(string)
				if id, err = parseMsgID(s); err != nil {
					return nil, nil, nil, nil, fmt.Errorf("%s of %q: %w", name, msgs[groups[g][0]].Gid, err)
				}
			}
			if i == 0 {
				floors[g] = id
			} else {
				heads[g] = id
			}
		}
	}
	if withLowest {
		lowest = make([]int64, len(groups))
		for g, cmd := range lows {
			lowest[g] = -1
			if z := cmd.Val(); len(z) > 0 {
				lowest[g] = int64(z[0].Score)
			}
		}
	}
	sized = make([]bool, len(groups))
	for g, cmd := range uptos {
		upto, err := cmd.Result()
		sized[g] = err == nil && int64(upto) >= heads[g]
	}
	return floors, lowest, heads, sized, nil
}

// pretrim leaves out of one group's batch the messages that trimming would
// drop at once: all but the WindowSize highest msgids. It returns the
// highest msgid left out (-1 for none) and the indexes to send.
func (r *Redis) pretrim(msgs []schema.Message, idx []int) (pre int64, keep []int) {
	size := r.cfg.WindowSize
	if size < 0 || len(idx) <= size {
		return -1, idx
	}
	keep = slices.Clone(idx)
	slices.SortFunc(keep, func(a, b int) int { return cmp.Compare(msgs[b].MsgID, msgs[a].MsgID) })
	keep = slices.CompactFunc(keep, func(a, b int) bool { return msgs[a].MsgID == msgs[b].MsgID })
	if len(keep) <= size {
		return -1, keep
	}
	return msgs[keep[size]].MsgID, keep[:size]
}

// Head returns the highest msgid persisted for the group, -1 when it has no
// message.
func (r *Redis) Head(ctx context.Context, gid string) (int64, error) {
	h, ok, err := optionalMsgID(r.client.Get(ctx, headKey(gid)))
	if err != nil {
		return 0, fmt.Errorf("store: head of %q: %w", gid, err)
	}
	if !ok {
		return -1, nil
	}
	return h, nil
}

// Heads returns Head of each group, in one round trip.
func (r *Redis) Heads(ctx context.Context, gids []string) (map[string]int64, error) {
	cmds := make([]*redis.StringCmd, len(gids))
	err := r.execPipe(ctx, func(p redis.Pipeliner) {
		for i, gid := range gids {
			cmds[i] = p.Get(ctx, headKey(gid))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("store: heads: %w", err)
	}
	heads := make(map[string]int64, len(gids))
	for i, gid := range gids {
		h, ok, err := optionalMsgID(cmds[i])
		if err != nil {
			return nil, fmt.Errorf("store: head of %q: %w", gid, err)
		}
		if !ok {
			h = -1
		}
		heads[gid] = h
	}
	return heads, nil
}

// optionalMsgID reads a msgid string; ok is false when the key is absent.
func optionalMsgID(cmd *redis.StringCmd) (id int64, ok bool, err error) {
	s, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	id, err = parseMsgID(s)
	return id, err == nil, err
}

// parseMsgID parses a msgid written by a script. Scores come back from
// Redis as doubles, which may be written as "1e+15".
func parseMsgID(s string) (int64, error) {
	if id, err := strconv.ParseInt(s, 10, 64); err == nil {
		return id, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("%w: msgid %q", ErrCorruptValue, s)
	}
	return int64(f), nil
}

// DedupWindow is how far apart, by sent_at, two sends with the same (gid,
// sender, client_msg_id) may be for the later one to be a duplicate: the
// fan-out decides duplicates as ClaimSends does.
func (r *Redis) DedupWindow() time.Duration { return r.cfg.DedupWindow }
