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

// claimReplayTTL is how long a claim lives at least. A claim expires
// DedupWindow after its message's sent_at; when a replay of old history
// makes that a time in the past, the claim still lives this long (capped at
// DedupWindow), so that a resend close behind its original in the log is
// recognised during the replay without old claims filling Redis.
const claimReplayTTL = 5 * time.Minute

// claimScript decides the sends of one group in msgid order. KEYS[i] is the
// claim key of message i; ARGV is the dedup window (ms), then msgid,
// sent_at (ClaimSentAt's) and claim TTL (ms, ClaimTTL's) of each message.
// It returns 1 (duplicate) or 0 per message. Its test of one send is
// SameSend's.
//
// A claim key holds "<msgid>:<sent_at>[:<prev>]": the last message that was
// not a duplicate, and the claim it replaced. For message m:
//   - no claim: m is new and claims the key;
//   - claim by m itself: a replay of m, which was not a duplicate;
//   - claim by an earlier message c: m is a duplicate iff their sent_at are
//     at most the window apart; otherwise m claims the key (prev = c);
//   - claim by a later message c (a replay while Redis is ahead of the
//     consumer): m was a duplicate iff the claim before c is older than m,
//     since had m not been a duplicate it would have been that claim. When
//     that is unknown (no prev), m is let through: a visible duplicate is
//     better than a lost message.
var claimScript = redis.NewScript(`
local win = tonumber(ARGV[1])
local cur = {}
for i = 1, #KEYS, 1000 do
  local got = redis.call('MGET', unpack(KEYS, i, math.min(i+999, #KEYS)))
  for j = 1, #got do
    cur[i+j-1] = got[j]
  end
end
local set = {}
local out = {}
for i = 1, #KEYS do
  local id, sent, ttl = ARGV[3*i-1], ARGV[3*i], ARGV[3*i+1]
  local nid, nsent = tonumber(id), tonumber(sent)
  local dup, claim, prev = 0, false, nil
  local v = set[KEYS[i]] or cur[i]
  local cid, csent, cprev
  if v then
    cid, csent, cprev = string.match(v, '^(%-?%d+):(%-?%d+):?(%-?%d*)$')
  end
  local c = tonumber(cid)
  if not c then
    claim = true
  elseif c < nid then
    -- A sent_at past what this Lua reads (an embedded Redis's tonumber
    -- stops at 2^63) is no clock: far from every send, as Redis reads it.
    if math.abs(nsent - (tonumber(csent) or math.huge)) <= win then
      dup = 1
    else
      claim, prev = true, cid
    end
  elseif c > nid then
    local p = tonumber(cprev)
    if p and p < nid then
      dup = 1
    end
  end
  if claim then
    v = id .. ':' .. sent
    if prev then
      v = v .. ':' .. prev
    end
    redis.call('SET', KEYS[i], v, 'PX', ttl)
    set[KEYS[i]] = v
  end
  out[i] = dup
end
return out
`)

// ClaimSends decides, for each message (all from one partition, in offset
// order), whether it is a duplicate send: the same (gid, sender,
// client_msg_id) as an earlier msgid whose sent_at is within DedupWindow of
// this one's. Messages with an empty ClientMsgID are never duplicates.
//
// It is deterministic under replay: claiming a message again (same msgid)
// gives the same answer, and a duplicate inside the batch is detected.
//
// Almost every send is new, so the batch first tries to claim every key
// with one SET NX GET each, all pipelined: a key that was free is now
// claimed by its message, exactly as claimScript would have done, and a key
// that holds the message's own claim is a replay of a non-duplicate. The
// rest (keys claimed by another message: resends and replays of resends)
// are decided by claimScript, one call per group, in a second round trip.
// For each key those are the batch's last messages, in order, so the
// script sees the state it would have seen deciding the whole batch.
//
// With a fence (the persister's), it claims nothing once the fence is gone
// and returns ErrStateLost (claims of the first round trip that went into
// a Redis wiped under it are deleted again).
func (r *Redis) ClaimSends(ctx context.Context, fence *Fence, msgs []schema.Message) (dup []bool, err error) {
	dup = make([]bool, len(msgs))
	c := r.claimClock()
	rest := make([]int, 0, 16)
	if r.noSetNXGet.Load() {
		for i := range msgs {
			if msgs[i].ClientMsgID != "" {
				rest = append(rest, i)
			}
		}
		if len(rest) > 0 {
			if err := r.verify(ctx, fence); err != nil {
				return nil, fmt.Errorf("store: claim sends: %w", err)
			}
		}
	} else if rest, err = r.claimFree(ctx, fence, msgs, c, rest); err != nil {
		return nil, fmt.Errorf("store: claim sends: %w", err)
	}
	if err := r.claimByScript(ctx, fence, msgs, rest, c, dup); err != nil {
		return nil, fmt.Errorf("store: claim sends: %w", err)
	}
	return dup, nil
}

// claimClock is what a claim's value and TTL depend on besides the message.
type claimClock struct{ win, now int64 }

// claimClock returns the clock of claims made now.
func (r *Redis) claimClock() claimClock {
	return claimClock{win: r.cfg.DedupWindow.Milliseconds(), now: time.Now().UnixMilli()}
}

// claimValue appends the claim value of m to buf: "<msgid>:<sent_at>".
func claimValue(buf []byte, m *schema.Message) []byte {
	buf = strconv.AppendInt(buf, m.MsgID, 10)
	buf = append(buf, ':')
	return strconv.AppendInt(buf, ClaimSentAt(m.SentAt), 10)
}

// maxClaimSentAt bounds the sent_at a claim holds: 2^53 ms (285,000 years)
// either side of 1970, within which claimScript's numbers (doubles) are
// exact.
const maxClaimSentAt = 1 << 53

// ClaimSentAt is the sent_at that a claim holds and the dedup rule
// compares: sent, clamped to ±2^53 ms. Beyond that is no clock but a
// poison record; every such sent_at is as far from any real send, and two
// of them on one side are the same send. Without the clamp, a difference
// of two sent_at values overflowed in Go (the ends of the range came out
// 1 ms apart) and was rounded in the script, so two deciders disagreed.
func ClaimSentAt(sent int64) int64 {
	return min(max(sent, -maxClaimSentAt), maxClaimSentAt)
}

// SameSend reports whether two sends of one (gid, sender, client_msg_id),
// sent at a and b (unix ms), are one send under the dedup window win (ms):
// their sent_at are at most win apart. claimScript decides the same in
// Redis; the fan-out decides with it in memory.
func SameSend(a, b, win int64) bool {
	d := ClaimSentAt(a) - ClaimSentAt(b)
	return -win <= d && d <= win
}

// ClaimTTL is how long, in ms, a claim made at now (unix ms) of a message
// sent at sent lives under the dedup window win (ms): until the window
// after sent, at least the replay TTL (claimReplayTTL, at most win), and at
// most twice the window. A sent_at ahead of the clock by more than the
// window is no clock skew but a broken clock or a poison record, whose
// expiry Redis may refuse as out of range on every retry. The fan-out
// forgets its copy of a claim after the same time.
func ClaimTTL(sent, now, win int64) int64 {
	least := min(claimReplayTTL.Milliseconds(), win)
	return min(max(ClaimSentAt(sent)+win-now, least), 2*win)
}

// execClaims runs pipe, which claims keys, with the fence's check after its
// writes: a wipe before any of them is then seen, and one after them took
// them with it. When the fence is gone it deletes the keys that taken
// lists (the claims that went into the wiped Redis) and returns
// ErrStateLost. Errors of the commands are left to the caller.
func (r *Redis) execClaims(ctx context.Context, fence *Fence, pipe redis.Pipeliner, taken func() []string) error {
	fenced := fence.check(ctx, pipe)
	_, _ = pipe.Exec(ctx) // errors are read per command
	err := fence.held(fenced)
	if errors.Is(err, ErrStateLost) {
		if uerr := r.undo(ctx, taken()); uerr != nil {
			return fmt.Errorf("%w; deleting the claims that went into the wiped Redis failed: %v", err, uerr)
		}
	}
	return err
}

// ttl is ClaimTTL of a claim made with c.
func (c claimClock) ttl(sent int64) int64 { return ClaimTTL(sent, c.now, c.win) }

// claimFree claims the free keys with SET NX GET and returns, in order, the
// messages left for claimScript. On a server without SET NX GET (before
// Redis 7.0) it claims nothing, notes it, and leaves every message.
func (r *Redis) claimFree(ctx context.Context, fence *Fence, msgs []schema.Message, c claimClock, rest []int) ([]int, error) {
	idx := make([]int, 0, len(msgs))
	cmds := make([]*redis.Cmd, 0, len(msgs))
	pipe := r.client.Pipeline()
	var val []byte
	for i := range msgs {
		m := &msgs[i]
		if m.ClientMsgID == "" {
			continue
		}
		val = claimValue(val[:0], m)
		idx = append(idx, i)
		cmds = append(cmds, pipe.Do(ctx, "set", claimKey(m.Gid, m.Sender, m.ClientMsgID), string(val), "px", c.ttl(m.SentAt), "nx", "get"))
	}
	if len(cmds) == 0 {
		return rest, nil
	}
	err := r.execClaims(ctx, fence, pipe, func() (taken []string) {
		for _, cmd := range cmds {
			if errors.Is(cmd.Err(), redis.Nil) {
				taken = append(taken, cmd.Args()[1].(string))
			}
		}
		return taken
	})
	if err != nil {
		return nil, err
	}
	for j, cmd := range cmds {
		v, err := cmd.Text()
		switch {
		case errors.Is(err, redis.Nil): // the key was free: claimed
		case err != nil && redis.HasErrorPrefix(err, "ERR syntax"):
			r.noSetNXGet.Store(true)
			return append(rest, idx...), nil
		case err != nil:
			return nil, err
		case !claimedBy(v, msgs[idx[j]].MsgID):
			rest = append(rest, idx[j])
		}
	}
	return rest, nil
}

// claimedBy reports whether the claim value v is the claim of msgid.
func claimedBy(v string, msgid int64) bool {
	id, _, ok := strings.Cut(v, ":")
	return ok && id == strconv.FormatInt(msgid, 10)
}

// claimByScript decides msgs[i] for i in idx with claimScript. With a
// fence it checks the fence after the scripts ran, and deletes the claims
// they made if it is gone: a Redis wiped since the first round trip would
// keep a resend's claim with no claim before it, and a replay would then
// let both the resend and its original through.
func (r *Redis) claimByScript(ctx context.Context, fence *Fence, msgs []schema.Message, idx []int, c claimClock, dup []bool) error {
	groups := groupIndexes(len(idx), func(j int) (string, bool) { return msgs[idx[j]].Gid, true })
	if len(groups) == 0 {
		return nil
	}
	calls := make([]scriptCall, len(groups))
	for g, js := range groups {
		keys := make([]string, len(js))
		args := make([]any, 0, 1+3*len(js))
		args = append(args, c.win)
		for k, j := range js {
			m := &msgs[idx[j]]
			keys[k] = claimKey(m.Gid, m.Sender, m.ClientMsgID)
			args = append(args, m.MsgID, ClaimSentAt(m.SentAt), c.ttl(m.SentAt))
		}
		calls[g] = scriptCall{keys: keys, args: args}
	}
	cmds, err := r.runScript(ctx, claimScript, calls)
	if err != nil {
		return err
	}
	for g, js := range groups {
		res, err := cmds[g].Int64Slice()
		if err != nil || len(res) != len(js) {
			return fmt.Errorf("%w: script returned %v (%v) for %d messages",
				ErrCorruptValue, cmds[g].Val(), err, len(js))
		}
		for k, j := range js {
			dup[idx[j]] = res[k] == 1
		}
	}
	if err := r.verify(ctx, fence); err != nil {
		if errors.Is(err, ErrStateLost) {
			var claimed []string
			for _, call := range calls {
				claimed = append(claimed, call.keys...)
			}
			if uerr := r.undo(ctx, claimed); uerr != nil {
				return fmt.Errorf("%w; deleting the claims that went into the wiped Redis failed: %v", err, uerr)
			}
		}
		return err
	}
	return nil
}

// ClaimOriginals claims the key of each message as ClaimSends did when it
// claimed it, unless the key holds a claim already. The messages are first
// sends that a replay no longer meets (retention removed them from the
// topic) and whose claims Redis lost: claimed again, ClaimSends finds
// their resends duplicates. Of several messages with one key, the highest
// msgid is claimed (the claim ClaimSends left last). With a fence, it
// claims nothing once the fence is gone and returns ErrStateLost, deleting
// the claims that went into a Redis wiped under it.
func (r *Redis) ClaimOriginals(ctx context.Context, fence *Fence, msgs []schema.Message) error {
	newest := make(map[string]*schema.Message, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if m.ClientMsgID == "" {
			continue
		}
		k := claimKey(m.Gid, m.Sender, m.ClientMsgID)
		if o := newest[k]; o == nil || o.MsgID < m.MsgID {
			newest[k] = m
		}
	}
	if len(newest) == 0 {
		return nil
	}
	c := r.claimClock()
	cmds := make(map[string]*redis.BoolCmd, len(newest))
	pipe := r.client.Pipeline()
	var val []byte
	for k, m := range newest {
		val = claimValue(val[:0], m)
		cmds[k] = pipe.SetNX(ctx, k, string(val), time.Duration(c.ttl(m.SentAt))*time.Millisecond)
	}
	err := r.execClaims(ctx, fence, pipe, func() (taken []string) {
		for k, cmd := range cmds {
			if cmd.Val() {
				taken = append(taken, k)
			}
		}
		return taken
	})
	if err != nil {
		return fmt.Errorf("store: claim originals: %w", err)
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("store: claim originals: %w", err)
		}
	}
	return nil
}

// groupIndexes groups the indexes 0..n-1 by gid, leaving out those for which
// of returns false. Groups come in order of their first index; each group's
// indexes stay in order.
func groupIndexes(n int, of func(i int) (gid string, ok bool)) [][]int {
	var groups [][]int
	at := make(map[string]int)
	for i := range n {
		gid, ok := of(i)
		if !ok {
			continue
		}
		g, seen := at[gid]
		if !seen {
			g = len(groups)
			at[gid] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}
