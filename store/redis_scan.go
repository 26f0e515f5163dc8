package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Projection names a part of the Redis state that is a projection of one
// topic and can be wiped and rebuilt by replaying it (chatctl rebuild).
type Projection string

// The projections that can be rebuilt.
const (
	ProjectionAcks    Projection = "acks"     // delivery cursors: chat:{gid}:ack
	ProjectionReads   Projection = "receipts" // read cursors: chat:{gid}:read
	ProjectionMembers Projection = "members"  // chat:{gid}:members, chat:{gid}:members-at and chat:{u:uid}:groups
)

// scanBatch is the COUNT hint of SCAN and the most UNLINKs per pipeline.
const scanBatch = 1000

// Wipe deletes every key of projection p and the saved offsets of consumer
// (its consumer group), so that the consumer replays its topic from the
// start. It walks the keyspace with SCAN on every master (never FLUSHDB:
// other data may share the server) and deletes with UNLINK, a key at a
// time, pipelined. It returns the number of keys deleted. Run it only
// while the consumer is stopped.
func (r *Redis) Wipe(ctx context.Context, p Projection, consumer string) (int64, error) {
	var deleted int64
	err := r.scanKeys(ctx, p, func(c redis.UniversalClient, keys []string) error {
		// One UNLINK per key, pipelined: on a cluster the keys of one
		// command must share a slot, and each group has its own.
		cmds := make([]*redis.IntCmd, len(keys))
		_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = pipe.Unlink(ctx, k)
			}
			return nil
		})
		for _, cmd := range cmds {
			deleted += cmd.Val()
		}
		return err
	})
	if err != nil {
		return deleted, fmt.Errorf("store: wipe %s: %w", p, err)
	}
	n, err := r.client.Del(ctx, offsetsKey(consumer)).Result()
	if err != nil {
		return deleted, fmt.Errorf("store: wipe offsets of %s: %w", consumer, err)
	}
	return deleted + n, nil
}

// EachCursors calls fn with every group's cursors of a cursor projection
// (ProjectionAcks or ProjectionReads), by uid, one group at a time, in no
// particular order.
func (r *Redis) EachCursors(ctx context.Context, p Projection, fn func(gid string, cursors map[string]int64) error) error {
	if p != ProjectionAcks && p != ProjectionReads {
		return fmt.Errorf("store: %s holds no cursors", p)
	}
	return r.eachKey(ctx, p, func(key string) error {
		c, err := r.cursors(ctx, key)
		if err != nil {
			return fmt.Errorf("store: %s: %w", key, err)
		}
		gid, _ := gidOfKey(key)
		return fn(gid, c)
	})
}

// EachMembers calls fn with every group's memberships, by uid, one group
// at a time, in no particular order. EachUserGroups walks the user index.
func (r *Redis) EachMembers(ctx context.Context, fn func(gid string, members map[string]Membership) error) error {
	return r.eachKey(ctx, ProjectionMembers, func(key string) error {
		if !isGroupKey(key, "members") {
			return nil // a user index key
		}
		gid, _ := gidOfKey(key)
		m, err := r.memberships(ctx, key)
		if err != nil {
			return fmt.Errorf("store: %s: %w", key, err)
		}
		return fn(gid, m)
	})
}

// EachUserGroups calls fn with every user's index of memberships, by gid.
func (r *Redis) EachUserGroups(ctx context.Context, fn func(uid string, groups map[string]Membership) error) error {
	return r.eachKey(ctx, ProjectionMembers, func(key string) error {
		uid, ok := uidOfKey(key)
		if !ok {
			return nil
		}
		m, err := r.memberships(ctx, key)
		if err != nil {
			return fmt.Errorf("store: %s: %w", key, err)
		}
		return fn(uid, m)
	})
}

func (r *Redis) eachKey(ctx context.Context, p Projection, fn func(key string) error) error {
	return r.scanKeys(ctx, p, func(_ redis.UniversalClient, keys []string) error {
		for _, k := range keys {
			if err := fn(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// scanKeys calls fn with batches of the keys of projection p, on the
// client of the node that holds them.
func (r *Redis) scanKeys(ctx context.Context, p Projection, fn func(c redis.UniversalClient, keys []string) error) error {
	var patterns []string
	var match func(string) bool
	switch p {
	case ProjectionAcks:
		patterns, match = []string{"chat:{*}:ack"}, func(k string) bool { return isGroupKey(k, "ack") }
	case ProjectionReads:
		patterns, match = []string{"chat:{*}:read"}, func(k string) bool { return isGroupKey(k, "read") }
	case ProjectionMembers:
		patterns = []string{"chat:{*}:members", "chat:{*}:members-at", "chat:{u:*}:groups"}
		match = func(k string) bool {
			_, user := uidOfKey(k)
			return isGroupKey(k, "members") || isGroupKey(k, "members-at") || user
		}
	default:
		return fmt.Errorf("store: unknown projection %q; want acks, receipts or members", p)
	}
	each := func(ctx context.Context, c redis.UniversalClient) error {
		for _, pat := range patterns {
			var cursor uint64
			for {
				keys, next, err := c.Scan(ctx, cursor, pat, scanBatch).Result()
				if err != nil {
					return err
				}
				mine := keys[:0]
				for _, k := range keys {
					if match(k) {
						mine = append(mine, k)
					}
				}
				if len(mine) > 0 {
					if err := fn(c, mine); err != nil {
						return err
					}
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		return nil
	}
	if cc, ok := r.client.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return each(ctx, c) })
	}
	return each(ctx, r.client)
}

// isGroupKey reports whether key is chat:{<gid>}:<suffix> for a gid
// without braces (ids never hold them).
func isGroupKey(key, suffix string) bool {
	gid, ok := gidOfKey(key)
	return ok && strings.HasSuffix(key, "}:"+suffix) && len(key) == len("chat:{}:")+len(gid)+len(suffix)
}

// gidOfKey returns the gid of a group key chat:{<gid>}:...
func gidOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "chat:{")
	if !ok {
		return "", false
	}
	gid, _, ok := strings.Cut(rest, "}")
	return gid, ok && gid != ""
}

// uidOfKey returns the uid of a user index key chat:{u:<uid>}:groups.
func uidOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "chat:{u:")
	if !ok {
		return "", false
	}
	uid, ok := strings.CutSuffix(rest, "}:groups")
	if !ok || uid == "" || strings.ContainsAny(uid, "{}") {
		return "", false
	}
	return uid, true
}
