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

// Presence: which gateway nodes a user is online on. Each gateway node
// writes its own entries (SetOnline when a user's first connection arrives,
// again every ttl/3 or so to keep them, SetOffline when the last one goes);
// an entry it stops refreshing (a crashed node) expires by itself. Expiry is
// judged by the clocks of the writer and the reader, so their skew must be
// small next to the ttl.

// presenceGrace is how long a user's presence key outlives its last entry,
// so that the reader's clock, not the server's, decides expiry; the key's own
// TTL only collects the garbage of users who never come back.
const presenceGrace = time.Minute

// announceChunk is the most uids in one announcement.
const announceChunk = 1000

// presenceScript records one node of one user. KEYS: the user's nodes.
// ARGV: node, expiry (unix ms), now (unix ms), grace (ms). It drops the
// entries that expired (from any node: they are dead) and keeps the key
// until grace after its latest entry.
var presenceScript = redis.NewScript(`
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[3])
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], string.format('%d', tonumber(top[2]) + tonumber(ARGV[4])))
return 1
`)

// SetOnline records that the users are online on node until ttl from now,
// one script call per user, pipelined. With announce (a user just
// connected, as opposed to a refresh) it also publishes the uids on
// chat:presence, so fan-outs drop their cached presence of them at once
// instead of after their cache TTL.
func (r *Redis) SetOnline(ctx context.Context, node string, uids []string, ttl time.Duration, announce bool) error {
	if err := checkPresence(node, uids); err != nil {
		return fmt.Errorf("store: set online: %w", err)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("store: set online: %w: ttl %v, want at least 1ms", ErrInvalidConfig, ttl)
	}
	if len(uids) == 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	expiry := now + ttl.Milliseconds()
	calls := make([]scriptCall, len(uids))
	for i, uid := range uids {
		calls[i] = scriptCall{keys: []string{presenceKey(uid)}, args: []any{node, expiry, now, presenceGrace.Milliseconds()}}
	}
	if _, err := r.runScript(ctx, presenceScript, calls); err != nil {
		return fmt.Errorf("store: set online: %w", err)
	}
	if !announce {
		return nil
	}
	err := r.execPipe(ctx, func(p redis.Pipeliner) {
		for rest := uids; len(rest) > 0; {
			n := min(len(rest), announceChunk)
			p.Publish(ctx, presenceChannel, strings.Join(rest[:n], " "))
			rest = rest[n:]
		}
	})
	if err != nil {
		return fmt.Errorf("store: set online: announce: %w", err)
	}
	return nil
}

// SetOffline removes node from the users' presence, pipelined.
func (r *Redis) SetOffline(ctx context.Context, node string, uids []string) error {
	if err := checkPresence(node, uids); err != nil {
		return fmt.Errorf("store: set offline: %w", err)
	}
	err := r.execPipe(ctx, func(p redis.Pipeliner) {
		for _, uid := range uids {
			p.ZRem(ctx, presenceKey(uid), node)
		}
	})
	if err != nil {
		return fmt.Errorf("store: set offline: %w", err)
	}
	return nil
}

// OnlineNodes returns, for each user online somewhere, the nodes whose entry
// has not expired; users online nowhere are absent. One pipeline for all.
func (r *Redis) OnlineNodes(ctx context.Context, uids []string) (map[string][]string, error) {
	out := make(map[string][]string)
	if len(uids) == 0 {
		return out, nil
	}
	after := "(" + strconv.FormatInt(time.Now().UnixMilli(), 10)
	pipe := r.client.Pipeline()
	cmds := make(map[string]*redis.StringSliceCmd, len(uids))
	for _, uid := range uids {
		if _, ok := cmds[uid]; !ok {
			cmds[uid] = pipe.ZRangeByScore(ctx, presenceKey(uid), &redis.ZRangeBy{Min: after, Max: "+inf"})
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: online nodes: %w", err)
	}
	for uid, cmd := range cmds {
		nodes, err := cmd.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("store: online nodes of %q: %w", uid, err)
		}
		if len(nodes) > 0 {
			out[uid] = nodes
		}
	}
	return out, nil
}

// SubscribePresence delivers the uids that SetOnline announces, until ctx
// ends; then the channel closes. It returns once the subscription is in
// place (an error if Redis cannot be reached).
//
// An empty string says that the subscription broke (a Redis restart, a
// network error) and was re-established: announcements made meanwhile are
// lost, so a cache of presence should be dropped whole.
//
// A reader that falls behind by more than the channel's buffer holds up the
// subscription; go-redis drops messages it cannot hand on for a minute.
func (r *Redis) SubscribePresence(ctx context.Context) (<-chan string, error) {
	sub, err := r.subscribe(ctx, presenceChannel)
	if err != nil {
		return nil, fmt.Errorf("store: subscribe to presence: %w", err)
	}
	out := make(chan string, subscribeBuffer)
	go func() {
		defer close(out)
		defer sub.close()
		for ev := range sub.events(ctx) {
			if ev.resubscribed {
				if !send(ctx, out, "") {
					return
				}
				continue
			}
			for uid := range strings.FieldsSeq(ev.payload) {
				if !send(ctx, out, uid) {
					return
				}
			}
		}
	}()
	return out, nil
}

func checkPresence(node string, uids []string) error {
	if err := schema.ValidID(node); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	for _, uid := range uids {
		if err := schema.ValidID(uid); err != nil {
			return fmt.Errorf("uid: %w", err)
		}
	}
	return nil
}

// nodeScript holds a gateway node's name for one instance. KEYS: the
// node's lease. ARGV: instance, ttl (ms). It returns the holder (the
// instance itself when the lease was free, expired or its own) and 1 when
// the lease was there already, 0 when it was not.
var nodeScript = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return {holder, 1}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if holder then
  return {ARGV[1], 1}
end
return {ARGV[1], 0}
`)

// HoldNode takes or renews the lease on a gateway node's name for ttl and
// returns who holds it: instance, or the other instance that does. Two
// gateways under one name would share its push channel, and each would take
// the other's users offline when its own last connection of them closed.
// held says that the lease was there before the call: a renewal that finds
// none knows that Redis lost it (it expired unrenewed, or Redis lost its
// data), and with it, likely, the node's presence entries.
func (r *Redis) HoldNode(ctx context.Context, node, instance string, ttl time.Duration) (holder string, held bool, err error) {
	if err := schema.ValidID(node); err != nil {
		return "", false, fmt.Errorf("store: hold node: %w", err)
	}
	if ttl < time.Millisecond {
		return "", false, fmt.Errorf("store: hold node: %w: ttl %v, want at least 1ms", ErrInvalidConfig, ttl)
	}
	v, err := nodeScript.Run(ctx, r.client, []string{nodeKey(node)}, instance, ttl.Milliseconds()).Slice()
	if err != nil {
		return "", false, fmt.Errorf("store: hold node %q: %w", node, err)
	}
	if len(v) != 2 {
		return "", false, fmt.Errorf("store: hold node %q: %w: answered %v", node, ErrCorruptValue, v)
	}
	holder, _ = v[0].(string)
	n, _ := v[1].(int64)
	return holder, n == 1, nil
}

// releaseNodeScript ends a lease if instance (ARGV[1]) still holds it.
var releaseNodeScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// ReleaseNode ends instance's lease on node, so that a gateway restarted
// under the same name takes it at once.
func (r *Redis) ReleaseNode(ctx context.Context, node, instance string) error {
	if err := releaseNodeScript.Run(ctx, r.client, []string{nodeKey(node)}, instance).Err(); err != nil {
		return fmt.Errorf("store: release node %q: %w", node, err)
	}
	return nil
}
