package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// SendState is what BeginSend found for (gid, uid, client_msg_id).
type SendState uint8

// The states of a send claim.
const (
	SendClaimed SendState = iota // new: the caller produces the message
	SendPending                  // another send with these ids is in flight
	SendDone                     // accepted before, with the returned msgid
)

// SendClaim is what BeginSend found.
type SendClaim struct {
	Member Membership // the sender's membership; no claim is taken unless joined
	State  SendState  // SendDone whatever the membership; else meaningful only if joined
	MsgID  int64      // SendDone: the msgid of the first send; else -1
}

// The gateway's send claims make a resend answer with the msgid of the
// first send instead of producing again. They are a fast path: the
// persister's claims (ClaimSends) remain the authority on duplicates.
// KEYS: send claim, the group's members, the note of uid's leave
// (MarkLeaving); ARGV: inflight (ms), uid. A leave noted but not yet
// projected ends the stretch it names.
var beginSendScript = redis.NewScript(`
local m = redis.call('HGET', KEYS[2], ARGV[2])
local l = redis.call('GET', KEYS[3])
local j = l and string.match(l, '^(%-?%d+):')
if m and j and m == 'j:' .. j then m = 'l:' .. l end
local v = redis.call('GET', KEYS[1])
if not m or string.sub(m, 1, 1) ~= 'j' then return {m or '', v or ''} end
if v then return {m, v} end
redis.call('SET', KEYS[1], 'pending', 'PX', ARGV[1])
return {m, ''}
`)

// BeginSend checks that uid is a joined member of gid and, if so, claims
// (gid, uid, cmid) for a send about to be produced, in one round trip; the
// claim expires after inflight unless ExtendSend renews it or FinishSend or
// AbortSend ends it. A send accepted before is SendDone also when uid has
// left since: its resend is answered with the first send's msgid. A leave
// noted by MarkLeaving counts as projected.
//
// When built is not nil, the membership is checked against its replay
// mark as Membership does; while it is missing, BeginSend claims nothing
// and fails with ErrReplaying.
func (r *Redis) BeginSend(ctx context.Context, gid, uid, cmid string, inflight time.Duration, built *Fence) (SendClaim, error) {
	out := SendClaim{Member: Membership{State: MemberNone}, MsgID: -1}
	var marked *redis.BoolCmd
	keys := []string{sendKey(gid, uid, cmid), membersKey(gid), leavingKey(gid, uid)}
	cmds, err := r.runScriptAfter(ctx, func(p redis.Pipeliner) { marked = built.checkReplayed(ctx, p) },
		beginSendScript, []scriptCall{{keys: keys, args: []any{inflight.Milliseconds(), uid}}})
	if err != nil {
		return out, fmt.Errorf("store: begin send: %w", err)
	}
	if out, err = beginSendResult(out, cmds[0]); err != nil {
		return out, fmt.Errorf("store: membership of %q in %q: %w", uid, gid, err)
	}
	if err := built.replayed(marked); err != nil {
		if out.State == SendClaimed {
			// The script ran beside the check: give back its claim.
			if aerr := r.AbortSend(ctx, gid, uid, cmid); aerr != nil {
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
	switch {
	case v[1] != "" && v[1] != "pending":
		if out.MsgID, err = strconv.ParseInt(v[1], 10, 64); err != nil {
			return out, fmt.Errorf("%w: send claim %q", ErrCorruptValue, v[1])
		}
		out.State = SendDone
	case out.Member.State != MemberJoined:
	case v[1] == "":
		out.State = SendClaimed
	default:
		out.State = SendPending
	}
	return out, nil
}

// finishSendScript records the msgid a send is answered with. KEYS[1] is
// the gateway's send claim, KEYS[2] the persister's claim of the same
// (gid, sender, cmid); ARGV is msgid, keep (ms), the oldest sent_at (ms) a
// persister claim may have to be this send's.
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
return best
`)

// FinishSend records the msgid of an accepted send for keep and returns the
// msgid to answer with: msgid, or the lower msgid of an earlier record of the
// same send (see finishSendScript).
func (r *Redis) FinishSend(ctx context.Context, gid, uid, cmid string, msgid int64, keep time.Duration) (int64, error) {
	oldest := time.Now().Add(-r.cfg.DedupWindow).UnixMilli()
	keys := []string{sendKey(gid, uid, cmid), claimKey(gid, uid, cmid)}
	id, err := finishSendScript.Run(ctx, r.client, keys, msgid, keep.Milliseconds(), oldest).Int64()
	if err != nil {
		return msgid, fmt.Errorf("store: finish send: %w", err)
	}
	return id, nil
}

// extendSendScript keeps a pending claim alive; a claim already finished
// or taken over is left alone.
var extendSendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == 'pending' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 0
`)

// ExtendSend renews a pending claim for another inflight while its produce
// is still running, so that a slow produce is not mistaken for a lost one.
func (r *Redis) ExtendSend(ctx context.Context, gid, uid, cmid string, inflight time.Duration) error {
	if err := extendSendScript.Run(ctx, r.client, []string{sendKey(gid, uid, cmid)}, inflight.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("store: extend send: %w", err)
	}
	return nil
}

// abortSendScript drops a claim that is still pending. One that holds a
// msgid is another attempt's answer: its claim was taken after this one's
// lapsed, and it finished.
var abortSendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == 'pending' then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// AbortSend drops a pending claim after a failed produce, so a retry can
// produce at once. A send answered meanwhile keeps its answer.
func (r *Redis) AbortSend(ctx context.Context, gid, uid, cmid string) error {
	if err := abortSendScript.Run(ctx, r.client, []string{sendKey(gid, uid, cmid)}).Err(); err != nil {
		return fmt.Errorf("store: abort send: %w", err)
	}
	return nil
}

func sendKey(gid, uid, cmid string) string { return groupPrefix(gid) + "sent:" + uid + "/" + cmid }
