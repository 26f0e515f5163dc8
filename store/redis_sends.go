package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SendState is what BeginSend found for (gid, uid, client_msg_id).
type SendState uint8

// The states of a send claim.
const (
	SendClaimed  SendState = iota // new: the caller produces the message
	SendPending                   // another send with these ids is in flight
	SendDone                      // accepted before, with the returned msgid
	SendRemoving                  // the sender is being removed (MarkRemoving): no claim taken
)

// SendClaim is what BeginSend found.
type SendClaim struct {
	Member  Membership // the sender's membership; no claim is taken unless joined
	State   SendState  // SendDone whatever the membership; else meaningful only if joined
	MsgID   int64      // SendDone: the msgid of the first send; else -1
	Attempt string     // SendClaimed: this attempt's claim, for ExtendSend, AbortSend and FinishSend
}

// The gateway's send claims make a resend answer with the msgid of the
// first send instead of producing again. They are a fast path: the
// persister's claims (ClaimSends) remain the authority on duplicates.
// KEYS: send claim, the group's members, the note of uid's leave
// (MarkLeaving), the note of uid's removal (MarkRemoving), uid's sends in
// flight; ARGV: inflight (ms), uid, the attempt. Times are Redis's own
// (TIME), so that gateways and chatctl on hosts whose clocks differ agree
// on what has lapsed. A leave
// noted but not yet projected ends the stretch it names; a removal noted
// refuses new claims of the stretch it names. A claim is
// "pending:<attempt>" in the send claim and the attempt, scored by its
// expiry, in the sends in flight (whose key expires with its newest
// entry; MarkRemoving takes out the lapsed ones of a user still sending).
var beginSendScript = redis.NewScript(`
local m = redis.call('HGET', KEYS[2], ARGV[2])
local l = redis.call('GET', KEYS[3])
local j = l and string.match(l, '^(%-?%d+):')
if m and j and m == 'j:' .. j then m = 'l:' .. l end
local v = redis.call('GET', KEYS[1])
if not m or string.sub(m, 1, 1) ~= 'j' then return {m or '', v or ''} end
if v then return {m, v} end
local r = redis.call('GET', KEYS[4])
local rj = r and string.match(r, '^(%-?%d+):')
if rj and m == 'j:' .. rj then return {m, 'removing'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], 'pending:' .. ARGV[3], 'PX', ARGV[1])
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[1]), ARGV[3])
redis.call('PEXPIRE', KEYS[5], ARGV[1])
return {m, ''}
`)

// BeginSend checks that uid is a joined member of gid and, if so, claims
// (gid, uid, cmid) for a send about to be produced, in one round trip; the
// claim expires after inflight unless ExtendSend renews it or FinishSend or
// AbortSend ends it. A send accepted before is SendDone also when uid has
// left since: its resend is answered with the first send's msgid. A leave
// noted by MarkLeaving counts as projected; while a removal of uid is
// noted (MarkRemoving), no claim is taken (SendRemoving).
//
// When built is not nil, the membership is checked against its replay
// mark as Membership does; while it is missing, BeginSend claims nothing
// and fails with ErrReplaying.
func (r *Redis) BeginSend(ctx context.Context, gid, uid, cmid string, inflight time.Duration, built *Fence) (SendClaim, error) {
	out := SendClaim{Member: Membership{State: MemberNone}, MsgID: -1}
	attempt := strconv.FormatUint(rand.Uint64(), 36)
	var marked *redis.BoolCmd
	keys := []string{sendKey(gid, uid, cmid), membersKey(gid), leavingKey(gid, uid), removingKey(gid, uid), sendingKey(gid, uid)}
	args := []any{inflight.Milliseconds(), uid, attempt}
	cmds, err := r.runScriptAfter(ctx, func(p redis.Pipeliner) { marked = built.checkReplayed(ctx, p) },
		beginSendScript, []scriptCall{{keys: keys, args: args}})
	if err != nil {
		return out, fmt.Errorf("store: begin send: %w", err)
	}
	if out, err = beginSendResult(out, cmds[0]); err != nil {
		return out, fmt.Errorf("store: membership of %q in %q: %w", uid, gid, err)
	}
	if out.State == SendClaimed {
		out.Attempt = attempt
	}
	if err := built.replayed(marked); err != nil {
		if out.State == SendClaimed {
			// The script ran beside the check: give back its claim.
			if aerr := r.AbortSend(ctx, gid, uid, cmid, attempt); aerr != nil {
				err = errors.Join(err, aerr)
			}
		}
		return SendClaim{Member: Membership{State: MemberNone}, MsgID: -1}, err
	}
	return out, nil
}

// beginSendResult reads beginSendScript's answer into out.
func beginSendResult(out SendClaim, cmd *redis.Cmd) (SendClaim, error) {
	v, err := cmd.StringSlice()
	if err != nil {
		return out, err
	}
	if len(v) != 2 {
		return out, fmt.Errorf("%w: begin send answered %q", ErrCorruptValue, v)
	}
	if v[0] != "" {
		if out.Member, err = parseMembership(v[0]); err != nil {
			return out, err
		}
	}
	pending := strings.HasPrefix(v[1], "pending")
	switch {
	case v[1] != "" && v[1] != "removing" && !pending:
		if out.MsgID, err = strconv.ParseInt(v[1], 10, 64); err != nil {
			return out, fmt.Errorf("%w: send claim %q", ErrCorruptValue, v[1])
		}
		out.State = SendDone
	case out.Member.State != MemberJoined:
	case v[1] == "":
		out.State = SendClaimed
	case pending:
		out.State = SendPending
	default:
		out.State = SendRemoving
	}
	return out, nil
}

// finishSendScript records the msgid a send is answered with. KEYS[1] is
// the gateway's send claim, KEYS[2] the persister's claim of the same
// (gid, sender, cmid), KEYS[3] the sender's sends in flight; ARGV is
// msgid, keep (ms), the oldest sent_at (ms) a persister claim may have to
// be this send's, the attempt.
//
// Two records of one send exist when a claim expired while its produce was
// still in flight (the gateway died, or Kafka took longer than the claim):
// the resend produced again. The persister and the fan-out keep the record
// with the lower msgid (it comes first in the partition), so the answer is
// the lowest msgid any of them has seen: an earlier FinishSend's, or the
// persister's claim when it is recent enough to be this send's.
var finishSendScript = redis.NewScript(`
local best = tonumber(ARGV[1])
local v = redis.call('GET', KEYS[1])
local n = v and tonumber(v)
if n and n < best then best = n end
local c = redis.call('GET', KEYS[2])
if c then
  local id, at = string.match(c, '^(%d+):(%d+)')
  id, at = tonumber(id), tonumber(at)
  if id and at and at >= tonumber(ARGV[3]) and id < best then best = id end
end
redis.call('SET', KEYS[1], best, 'PX', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[4])
return best
`)

// FinishSend records the msgid of an accepted send for keep, ends the
// attempt's claim and returns the
// msgid to answer with: msgid, or the lower msgid of an earlier record of the
// same send (see finishSendScript).
func (r *Redis) FinishSend(ctx context.Context, gid, uid, cmid, attempt string, msgid int64, keep time.Duration) (int64, error) {
	oldest := time.Now().Add(-r.cfg.DedupWindow).UnixMilli()
	keys := []string{sendKey(gid, uid, cmid), claimKey(gid, uid, cmid), sendingKey(gid, uid)}
	id, err := finishSendScript.Run(ctx, r.client, keys, msgid, keep.Milliseconds(), oldest, attempt).Int64()
	if err != nil {
		return msgid, fmt.Errorf("store: finish send: %w", err)
	}
	return id, nil
}

// extendSendScript keeps an attempt's pending claim alive, in the send
// claim and in the sender's sends in flight; a claim already finished or
// taken over by another attempt is left alone. KEYS: send claim, sends in
// flight; ARGV: inflight (ms), the attempt.
var extendSendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == 'pending:' .. ARGV[2] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZADD', KEYS[2], 'XX', now + tonumber(ARGV[1]), ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
  return redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 0
`)

// ExtendSend renews an attempt's pending claim for another inflight while
// its produce is still running, so that a slow produce is not mistaken
// for a lost one.
func (r *Redis) ExtendSend(ctx context.Context, gid, uid, cmid, attempt string, inflight time.Duration) error {
	keys := []string{sendKey(gid, uid, cmid), sendingKey(gid, uid)}
	if err := extendSendScript.Run(ctx, r.client, keys, inflight.Milliseconds(), attempt).Err(); err != nil {
		return fmt.Errorf("store: extend send: %w", err)
	}
	return nil
}

// abortSendScript drops an attempt's claim while it is still pending. One
// that holds a msgid, or another attempt's, was taken after this one's
// lapsed. KEYS: send claim, sends in flight; ARGV: the attempt.
var abortSendScript = redis.NewScript(`
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('GET', KEYS[1]) == 'pending:' .. ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// AbortSend drops an attempt's pending claim after a failed produce, so a
// retry can produce at once. A send answered meanwhile keeps its answer,
// and another attempt its claim.
func (r *Redis) AbortSend(ctx context.Context, gid, uid, cmid, attempt string) error {
	if err := abortSendScript.Run(ctx, r.client, []string{sendKey(gid, uid, cmid), sendingKey(gid, uid)}, attempt).Err(); err != nil {
		return fmt.Errorf("store: abort send: %w", err)
	}
	return nil
}

// ErrRemoving says that another removal of the same member is under way
// (MarkRemoving).
var ErrRemoving = errors.New("store: a removal of the member is under way")

// removeScript notes a removal. KEYS: the note of uid's removal, uid's
// sends in flight; ARGV: the join position of the stretch being ended,
// hold (ms), the removal's token. It returns -1 when another removal of
// the stretch holds the note; else it takes out the lapsed sends and
// returns those still in flight.
var removeScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^(%-?%d+):') == ARGV[1] and cur ~= ARGV[1] .. ':' .. ARGV[3] then
  return -1
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[3], 'PX', ARGV[2])
local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return redis.call('ZCARD', KEYS[2])
`)

// MarkRemoving notes, for hold, that uid, a member of gid since joined, is
// being removed by the removal token: BeginSend takes no claim of theirs
// meanwhile (SendRemoving), unless they join gid again. It returns how
// many sends of uid to gid were claimed before and are still in flight,
// neither finished, aborted nor lapsed; WaitSends waits for them. While
// another removal of the same stretch holds the note, it fails with
// ErrRemoving: two at once could end a stretch joined again in between.
// MarkLeaving and EndRemoving drop the note.
func (r *Redis) MarkRemoving(ctx context.Context, gid, uid string, joined int64, token string, hold time.Duration) (int, error) {
	keys := []string{removingKey(gid, uid), sendingKey(gid, uid)}
	n, err := removeScript.Run(ctx, r.client, keys, joined, max(hold.Milliseconds(), 1), token).Int()
	switch {
	case err != nil:
		return 0, fmt.Errorf("store: note the removal of %s from %s: %w", uid, gid, err)
	case n < 0:
		return 0, fmt.Errorf("%w: %s from %s", ErrRemoving, uid, gid)
	}
	return n, nil
}

// endRemovingScript drops the note of a removal if it is still the
// token's. KEYS: the note; ARGV: the token.
var endRemovingScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, ':(.*)$') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// EndRemoving drops the note of MarkRemoving of the removal token, which
// failed: the member's sends go through again, and another removal may
// start.
func (r *Redis) EndRemoving(ctx context.Context, gid, uid, token string) error {
	if err := endRemovingScript.Run(ctx, r.client, []string{removingKey(gid, uid)}, token).Err(); err != nil {
		return fmt.Errorf("store: end the removal of %s from %s: %w", uid, gid, err)
	}
	return nil
}

// inFlightScript counts the sends in flight by Redis's clock. KEYS: the
// sends in flight.
var inFlightScript = redis.NewScript(`
local t = redis.call('TIME')
return redis.call('ZCOUNT', KEYS[1], '(' .. (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)), '+inf')
`)

// SendsInFlight returns how many sends of uid to gid are claimed and
// neither finished, aborted nor lapsed.
func (r *Redis) SendsInFlight(ctx context.Context, gid, uid string) (int, error) {
	n, err := inFlightScript.Run(ctx, r.client, []string{sendingKey(gid, uid)}).Int()
	if err != nil {
		return 0, fmt.Errorf("store: sends of %s to %s in flight: %w", uid, gid, err)
	}
	return n, nil
}

// WaitSends waits until no send of uid to gid is in flight (SendsInFlight),
// or wait has passed, and returns how many still are. It looks every 5 ms
// at first, less often as it takes longer.
func (r *Redis) WaitSends(ctx context.Context, gid, uid string, wait time.Duration) (int, error) {
	deadline := time.Now().Add(wait)
	for d := 5 * time.Millisecond; ; d = min(2*d, 200*time.Millisecond) {
		n, err := r.SendsInFlight(ctx, gid, uid)
		if err != nil || n == 0 || !time.Now().Before(deadline) {
			return n, err
		}
		t := time.NewTimer(min(d, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return n, ctx.Err()
		case <-t.C:
		}
	}
}

func sendKey(gid, uid, cmid string) string { return groupPrefix(gid) + "sent:" + uid + "/" + cmid }

func sendingKey(gid, uid string) string { return groupPrefix(gid) + "sending:" + uid }

func removingKey(gid, uid string) string { return groupPrefix(gid) + "removing:" + uid }
