package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// WindowRange is what a read of a group's window finds, in one
// transaction.
type WindowRange struct {
	Messages []schema.Message // ascending msgid, MsgID set
	// Floor is the highest msgid trimmed from the window, -1 when nothing
	// was: the window holds every message of the group above Floor, and
	// the ones at or below it must come from the history store. A floor
	// is always one of the group's msgids.
	Floor int64
	// Head is the group's newest msgid, -1 when it has none. The persister
	// raises it just after adding a batch, so Messages may end above it.
	Head int64
	// Cut says that the read stopped at its byte budget: more messages of
	// the range follow (Window) or precede (WindowBefore) Messages.
	Cut bool
}

// WindowBefore returns the newest messages of the group with after < msgid
// < before, at most limit, in ascending order: what a client scrolling up
// past msgid `before` loads next. Messages at or below Floor are not there.
// With maxBytes > 0 it stops before the window members (a message's
// encoding) would pass maxBytes, after one message at least (Cut).
func (r *Redis) WindowBefore(ctx context.Context, gid string, after, before int64, limit, maxBytes int) (WindowRange, error) {
	if limit <= 0 {
		return WindowRange{}, fmt.Errorf("store: window of %q: %w, got %d", gid, ErrInvalidLimit, limit)
	}
	if before <= after+1 {
		before = after + 1 // an empty range; the floor and head are still read
	}
	wr, err := r.windowRange(ctx, gid, "("+strconv.FormatInt(after, 10), "("+strconv.FormatInt(before, 10), limit, maxBytes, true)
	if err != nil {
		return WindowRange{}, fmt.Errorf("store: window of %q before %d: %w", gid, before, err)
	}
	slices.Reverse(wr.Messages)
	return wr, nil
}

// Window returns the group's messages with msgid > after, ascending, at
// most limit, and with maxBytes > 0 at most as many as WindowBefore takes.
// Messages at or below Floor are not there: when after < Floor, the
// messages in (after, Floor] must come from the history store, and
// Messages starts above the floor.
func (r *Redis) Window(ctx context.Context, gid string, after int64, limit, maxBytes int) (WindowRange, error) {
	if limit <= 0 {
		return WindowRange{}, fmt.Errorf("store: window of %q: %w, got %d", gid, ErrInvalidLimit, limit)
	}
	wr, err := r.windowRange(ctx, gid, "("+strconv.FormatInt(after, 10), "+inf", limit, maxBytes, false)
	if err != nil {
		return WindowRange{}, fmt.Errorf("store: window of %q: %w", gid, err)
	}
	return wr, nil
}

// windowScript reads a range of the window with the group's floor and
// head. KEYS: win, floor, head. ARGV: the range's low and high ends (as
// ZRANGEBYSCORE takes them), limit, byte budget (0: none), "1" to read from
// the high end. With a budget it reads a few members first and then as
// many as the budget has room for at their average size, so a range of
// large messages is never copied whole to be cut afterwards. It answers
// {floor, head, cut, members...}, "" for an absent floor or head.
var windowScript = redis.NewScript(`
local lo, hi, limit, budget, rev = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1'
local out = {redis.call('GET', KEYS[2]) or '', redis.call('GET', KEYS[3]) or '', 0}
local n, bytes = 0, 0
local want = limit
if budget > 0 then want = math.min(limit, 32) end
while want > 0 do
  local got
  if rev then
    got = redis.call('ZREVRANGEBYSCORE', KEYS[1], hi, lo, 'WITHSCORES', 'LIMIT', 0, want)
  else
    got = redis.call('ZRANGEBYSCORE', KEYS[1], lo, hi, 'WITHSCORES', 'LIMIT', 0, want)
  end
  for i = 1, #got, 2 do
    if budget > 0 and n > 0 and bytes + #got[i] > budget then
      out[3] = 1
      return out
    end
    n, bytes = n + 1, bytes + #got[i]
    out[3 + n] = got[i]
  end
  if #got < 2 * want or n >= limit then
    return out
  end
  if rev then hi = '(' .. got[#got] else lo = '(' .. got[#got] end
  want = limit - n
  if budget > 0 then want = math.min(want, math.floor((budget - bytes) * n / bytes) + 1) end
end
return out
`)

// windowRange runs windowScript.
func (r *Redis) windowRange(ctx context.Context, gid, lo, hi string, limit, maxBytes int, rev bool) (WindowRange, error) {
	dir := "0"
	if rev {
		dir = "1"
	}
	cmds, err := r.runScript(ctx, windowScript, []scriptCall{{
		keys: []string{windowKey(gid), floorKey(gid), headKey(gid)},
		args: []any{lo, hi, limit, max(maxBytes, 0), dir},
	}})
	if err != nil {
		return WindowRange{}, err
	}
	v, err := cmds[0].Slice()
	if err != nil {
		return WindowRange{}, err
	}
	if len(v) < 3 {
		return WindowRange{}, fmt.Errorf("%w: window read answered %d values", ErrCorruptValue, len(v))
	}
	wr := WindowRange{Floor: -1, Head: -1}
	for i, to := range []*int64{&wr.Floor, &wr.Head} {
		s, ok := v[i].(string)
		if !ok {
			return WindowRange{}, fmt.Errorf("%w: window read answered %T for the %s", ErrCorruptValue, v[i], [2]string{"floor", "head"}[i])
		}
		if s == "" {
			continue
		}
		if *to, err = parseMsgID(s); err != nil {
			return WindowRange{}, fmt.Errorf("%s: %w", [2]string{"floor", "head"}[i], err)
		}
	}
	cut, _ := v[2].(int64)
	wr.Cut = cut == 1
	members := make([]string, len(v)-3)
	for i, m := range v[3:] {
		s, ok := m.(string)
		if !ok {
			return WindowRange{}, fmt.Errorf("%w: window member %T", ErrCorruptValue, m)
		}
		members[i] = s
	}
	if wr.Messages, err = decodeWindowMembers(members); err != nil {
		return WindowRange{}, err
	}
	// A late append (an old owner of the partition that stalled between
	// reading the floor and writing) adds messages the window has trimmed
	// since, and its trim removes them one command later: they are not the
	// window's, and a page built on them would repeat or skip messages.
	wr.Messages = slices.DeleteFunc(wr.Messages, func(m schema.Message) bool { return m.MsgID <= wr.Floor })
	return wr, nil
}

// decodeWindowMembers decodes the members of a window range.
func decodeWindowMembers(members []string) ([]schema.Message, error) {
	msgs := make([]schema.Message, 0, len(members))
	for _, s := range members {
		m, err := decodeWindowMember(s)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func decodeWindowMember(s string) (schema.Message, error) {
	if len(s) < 8 {
		return schema.Message{}, fmt.Errorf("%w: window member of %d bytes", ErrCorruptValue, len(s))
	}
	b := []byte(s)
	m, err := schema.DecodeMessage(b[8:])
	if err != nil {
		return m, fmt.Errorf("%w: window member: %w", ErrCorruptValue, err)
	}
	m.MsgID = int64(binary.BigEndian.Uint64(b[:8]))
	return m, nil
}

// PersistedPrevs returns, for each gid, the msgid of the group's last
// message before before[gid] as consumer (the persister) stored it from
// partition part of topic, where that is certain: the window holds an
// earlier message of the group, or holds none and never dropped one while
// the consumer's state holds the partition's whole log (its origin is
// offset 0; then -1: the group had none before), and the consumer's saved
// position shows
// the window has every message that matters (it saves it only once they are
// in the window). That is when the position is past every record before
// before[gid], or past every record before seenFrom: the caller read every
// record of the partition from seenFrom on and found none of the group's
// before before[gid], so what the window holds before seenFrom is all
// there is. A state rebuilt from a log whose start retention moved (an
// origin past 0, see Origin) has no window for a group silent since before
// that start: its last message is in ClickHouse, so no window is no
// answer. Pass math.MaxInt64 as seenFrom when no such read is known. A
// message at offset 0 has prev -1 whatever was saved. Other groups are
// absent. One pipeline for all.
//
// The fan-out uses it for the prev of the first message of a group in its
// assignment, so that clients need not pull after each fan-out restart, nor
// for each new group's first message.
func (r *Redis) PersistedPrevs(ctx context.Context, consumer, topic string, part int, seenFrom int64, before map[string]int64) (map[string]int64, error) {
	out := make(map[string]int64, len(before))
	if len(before) == 0 {
		return out, nil
	}
	type q struct {
		win   *redis.ZSliceCmd
		floor *redis.StringCmd
	}
	pipe := r.client.Pipeline()
	pos := pipe.HGet(ctx, offsetsKey(consumer), offsetField(topic, part))
	origin := pipe.HGet(ctx, offsetsKey(consumer), originField(topic, part))
	qs := make(map[string]q, len(before))
	for gid, id := range before {
		qs[gid] = q{
			win: pipe.ZRevRangeByScoreWithScores(ctx, windowKey(gid),
				&redis.ZRangeBy{Max: "(" + strconv.FormatInt(id, 10), Min: "-inf", Count: 1}),
			floor: pipe.Get(ctx, floorKey(gid)),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: persisted prevs: %w", err)
	}
	next, err := pos.Int64()
	switch {
	case errors.Is(err, redis.Nil):
		next = 0 // nothing saved: only the partition's first record is certain
	case err != nil:
		return nil, fmt.Errorf("store: persisted prevs: %w: offset %q", ErrCorruptValue, pos.Val())
	case next < 0:
		next = 0 // claimed before its first record: kafka.FirstOffset (-2), nothing stored yet
	}
	// A group with no window had no message before id when the caller
	// read the partition from its first record, or the state holds every
	// record from there (its origin is 0): a state that began past it, or
	// whose origin is unknown, lacks the groups silent since.
	off, _, _ := strings.Cut(origin.Val(), ":")
	whole := seenFrom == 0 || off == "0"
	for gid, id := range before {
		if id <= 0 {
			out[gid] = -1 // nothing comes before a partition's first record
			continue
		}
		if next < min(id, seenFrom) {
			continue
		}
		win := qs[gid].win.Val()
		floor, trimmed, err := optionalMsgID(qs[gid].floor)
		if err != nil {
			return nil, fmt.Errorf("store: persisted prevs: floor of %q: %w", gid, err)
		}
		switch {
		case len(win) > 0 && (!trimmed || int64(win[0].Score) > floor):
			out[gid] = int64(win[0].Score)
		case len(win) > 0:
			// At or below the floor: a late append's message that its
			// trim has yet to remove (see windowRange), not the window's.
		case !trimmed && whole:
			out[gid] = -1
		}
	}
	return out, nil
}
