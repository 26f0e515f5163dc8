package store

import (
	"context"
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

// The gateway's send claims make a resend answer with the msgid of the
// first send instead of producing again. They are a fast path: the
// persister's claims (ClaimSends) remain the authority on duplicates.
var beginSendScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], 'pending', 'PX', ARGV[1])
return false
`)

// BeginSend claims (gid, uid, cmid) for a send about to be produced; the
// claim expires after inflight unless FinishSend or AbortSend ends it.
func (r *Redis) BeginSend(ctx context.Context, gid, uid, cmid string, inflight time.Duration) (int64, SendState, error) {
	v, err := beginSendScript.Run(ctx, r.client, []string{sendKey(gid, uid, cmid)}, inflight.Milliseconds()).Result()
	if err == redis.Nil {
		return -1, SendClaimed, nil
	}
	if err != nil {
		return -1, 0, fmt.Errorf("store: begin send: %w", err)
	}
	s, _ := v.(string)
	if s == "pending" {
		return -1, SendPending, nil
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1, 0, fmt.Errorf("%w: send claim %q", ErrCorruptValue, s)
	}
	return id, SendDone, nil
}

// FinishSend records the msgid of an accepted send for keep.
func (r *Redis) FinishSend(ctx context.Context, gid, uid, cmid string, msgid int64, keep time.Duration) error {
	if err := r.client.Set(ctx, sendKey(gid, uid, cmid), msgid, keep).Err(); err != nil {
		return fmt.Errorf("store: finish send: %w", err)
	}
	return nil
}

// AbortSend drops a pending claim after a failed produce, so a retry can
// produce at once.
func (r *Redis) AbortSend(ctx context.Context, gid, uid, cmid string) error {
	if err := r.client.Del(ctx, sendKey(gid, uid, cmid)).Err(); err != nil {
		return fmt.Errorf("store: abort send: %w", err)
	}
	return nil
}

func sendKey(gid, uid, cmid string) string { return groupPrefix(gid) + "sent:" + uid + "/" + cmid }
