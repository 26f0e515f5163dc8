package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/groupchat/chatd/schema"

	"github.com/redis/go-redis/v9"
)

// ReadState is a snapshot of one group's membership and read cursors, from
// which read counts and who-read lists of any messages are computed without
// a row per (message, reader): the read count of m is the number of members
// at the time m was sent, other than its sender, whose read cursor is >= m.
//
// A member who left and rejoined after m is judged by their current
// membership (joined after m): the read before leaving is not counted.
//
// A ReadState loaded by Redis.ReadState also holds a flat copy of both
// maps, which Count walks instead of the maps (read_counts of a page counts
// every message over every member); one built by hand is counted from its
// maps. Neither is to be changed after loading.
type ReadState struct {
	Members map[string]Membership
	Reads   map[string]int64 // read cursor by uid; absent: none

	flat []reader // the members with their read cursors, when loaded
}

// reader is a member and its read cursor (-2: none; cursors are >= -1).
type reader struct {
	uid  string
	m    Membership
	read int64
}

// ReadState loads the group's snapshot in one round trip, in one
// transaction: a join raises the read cursor with the membership, and a
// cursor read after a rejoin paired with the membership before it would
// count reads of messages the member never read.
func (r *Redis) ReadState(ctx context.Context, gid string) (*ReadState, error) {
	var members *redis.MapStringStringCmd
	var reads *redis.ZSliceCmd
	_, err := r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		members = p.HGetAll(ctx, membersKey(gid))
		reads = p.ZRangeWithScores(ctx, readKey(gid), 0, -1)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: read state of %q: %w", gid, err)
	}
	st := &ReadState{Members: make(map[string]Membership, len(members.Val())), Reads: make(map[string]int64, len(reads.Val()))}
	for uid, v := range members.Val() {
		m, err := parseMembership(v)
		if err != nil {
			return nil, fmt.Errorf("store: read state of %q: %q: %w", gid, uid, err)
		}
		st.Members[uid] = m
	}
	for _, z := range reads.Val() {
		uid, _ := z.Member.(string)
		st.Reads[uid] = int64(z.Score)
	}
	st.flat = make([]reader, 0, len(st.Members))
	for uid, m := range st.Members {
		r, ok := st.Reads[uid]
		if !ok {
			r = -2
		}
		st.flat = append(st.flat, reader{uid, m, r})
	}
	return st, nil
}

// Audience returns the members who were members when msgid was sent, other
// than its sender, sorted.
func (s *ReadState) Audience(msgid int64, sender string) []string {
	var out []string
	for uid, m := range s.Members {
		if uid != sender && m.Sees(msgid) {
			out = append(out, uid)
		}
	}
	sort.Strings(out)
	return out
}

// Count returns how many of the audience of msgid have read it, and the
// audience's size.
func (s *ReadState) Count(msgid int64, sender string) (read, audience int) {
	if s.flat != nil {
		for i := range s.flat {
			r := &s.flat[i]
			if !r.m.Sees(msgid) || r.uid == sender {
				continue
			}
			audience++
			if r.read >= msgid {
				read++
			}
		}
		return read, audience
	}
	for uid, m := range s.Members {
		if uid == sender || !m.Sees(msgid) {
			continue
		}
		audience++
		if c, ok := s.Reads[uid]; ok && c >= msgid {
			read++
		}
	}
	return read, audience
}

// Seeing counts the members who see at least one of the messages from lo
// to hi: the most any of them has in its audience (the sender included).
// Former members outside that span are not counted.
func (s *ReadState) Seeing(lo, hi int64) int {
	n := 0
	for _, m := range s.Members {
		switch m.State {
		case MemberJoined:
			if hi > m.JoinedAt {
				n++
			}
		case MemberLeft:
			if max(lo, m.JoinedAt+1) <= min(hi, m.LeftAt) {
				n++
			}
		}
	}
	return n
}

// Who splits the audience of msgid into those who have read it and those
// who have not, each sorted.
func (s *ReadState) Who(msgid int64, sender string) (read, unread []string) {
	for _, uid := range s.Audience(msgid, sender) {
		if c, ok := s.Reads[uid]; ok && c >= msgid {
			read = append(read, uid)
		} else {
			unread = append(unread, uid)
		}
	}
	return read, unread
}

// sendersScript finds messages in a group's window and returns their
// senders, read out of each window member (8-byte msgid ++
// schema.AppendMessage: version and kind, then gid and sender, each a
// uvarint length and its bytes), so that no body leaves Redis. KEYS: the
// window. ARGV: the two bytes a message's encoding starts with, then the
// msgids, ascending. It answers msgid, sender for each msgid found, in
// turn; the sender is "" when the member is no message's encoding.
//
// Copying a member into Lua costs Redis about 1.4 ns a byte, more than
// sending a page of it (0.5 to 1.2), and a call from Lua about 1.5 µs: a
// range that holds little besides the msgids asked for (a page) is read in
// one call, scattered msgids one call each, so that no other member is
// copied.
var sendersScript = redis.NewScript(`
local v, k = string.byte(ARGV[1], 1, 2)
local byte, sub = string.byte, string.sub
local function uvarint(s, i)
  local n, mul = 0, 1
  for j = i, math.min(i + 9, #s) do
    local b = byte(s, j)
    n = n + (b % 128) * mul
    if b < 128 then return n, j + 1 end
    mul = mul * 128
  end
  return nil
end
local function sender(m)
  local a, b, n = byte(m, 9, 11)
  if a ~= v or b ~= k or not n then return '' end
  local at = 12
  if n >= 128 then n, at = uvarint(m, 11) end
  if n then
    at = at + n
    n = byte(m, at)
    at = at + 1
    if n and n >= 128 then n, at = uvarint(m, at - 1) end
  end
  if n and at + n - 1 <= #m then return sub(m, at, at + n - 1) end
  return ''
end
local lo, hi, out = ARGV[2], ARGV[#ARGV], {}
if redis.call('ZCOUNT', KEYS[1], lo, hi) <= #ARGV + 15 then
  local want = {}
  for i = 2, #ARGV do want[tonumber(ARGV[i])] = ARGV[i] end
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], lo, hi)) do
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(m, 1, 8)
    local id = b8 and want[((((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6) * 256 + b7) * 256 + b8]
    if id then
      out[#out + 1] = id
      out[#out + 1] = sender(m)
    end
  end
  return out
end
for i = 2, #ARGV do
  local m = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i], 'LIMIT', 0, 1)[1]
  if m then
    out[#out + 1] = ARGV[i]
    out[#out + 1] = sender(m)
  end
end
return out
`)

// messageHead is what every message's encoding starts with.
var messageHead = string([]byte{schema.Version, byte(schema.KindMessage)})

// WindowSenders returns the sender of each of msgids that is in gid's
// window, by msgid; those not there (trimmed to the history store, or not
// the group's) are absent. Only the senders leave Redis, in one round
// trip: read counts of a page of large messages cost about their answer,
// not the page's bodies.
func (r *Redis) WindowSenders(ctx context.Context, gid string, msgids []int64) (map[int64]string, error) {
	out := make(map[int64]string, len(msgids))
	if len(msgids) == 0 {
		return out, nil
	}
	ids := slices.Clone(msgids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	args := make([]any, 0, 1+len(ids))
	args = append(args, messageHead)
	for _, id := range ids {
		args = append(args, id)
	}
	cmds, err := r.runScript(ctx, sendersScript, []scriptCall{{keys: []string{windowKey(gid)}, args: args}})
	var v []any
	if err == nil {
		v, err = cmds[0].Slice()
	}
	if err != nil {
		return nil, fmt.Errorf("store: senders in the window of %q: %w", gid, err)
	}
	for i := 0; i+1 < len(v); i += 2 {
		s, _ := v[i].(string)
		sender, _ := v[i+1].(string)
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || schema.ValidID(sender) != nil {
			return nil, fmt.Errorf("store: senders in the window of %q: %w: %q sent by %q", gid, ErrCorruptValue, s, sender)
		}
		out[id] = sender
	}
	return out, nil
}

// WindowUpTo returns the newest messages of gid with lo < msgid <= hi that
// are in the window, at most limit, ascending.
func (r *Redis) WindowUpTo(ctx context.Context, gid string, lo, hi int64, limit int) ([]schema.Message, error) {
	vals, err := r.client.ZRevRangeByScore(ctx, windowKey(gid), &redis.ZRangeBy{
		Max: strconv.FormatInt(hi, 10), Min: "(" + strconv.FormatInt(lo, 10), Count: int64(limit)}).Result()
	if err != nil {
		return nil, fmt.Errorf("store: window of %q up to %d: %w", gid, hi, err)
	}
	out := make([]schema.Message, len(vals))
	for i, v := range vals {
		m, err := decodeWindowMember(v)
		if err != nil {
			return nil, fmt.Errorf("store: window of %q: %w", gid, err)
		}
		out[len(vals)-1-i] = m
	}
	return out, nil
}
