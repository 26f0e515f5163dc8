package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// MarkJoining notes, for ttl, that a join of each of uids to gid is being
// written, and reports for each whether it was not noted already. A join
// is in the log before the member projector has it in Redis; a second
// join written meanwhile (an admin's retry) would move the member's start
// forward and hide what was sent in between. ClearJoining drops the note.
func (r *Redis) MarkJoining(ctx context.Context, gid string, uids []string, ttl time.Duration) ([]bool, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.BoolCmd, len(uids))
	err := r.execPipe(ctx, func(p redis.Pipeliner) {
		for i, uid := range uids {
			cmds[i] = p.SetNX(ctx, joiningKey(gid, uid), 1, ttl)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("store: mark joins to %s: %w", gid, err)
	}
	fresh := make([]bool, len(uids))
	for i, c := range cmds {
		fresh[i] = c.Val()
	}
	return fresh, nil
}

// Joining reports whether a join of uid to gid was noted by MarkJoining
// within its ttl and not cleared since.
func (r *Redis) Joining(ctx context.Context, gid, uid string) (bool, error) {
	n, err := r.client.Exists(ctx, joiningKey(gid, uid)).Result()
	if err != nil {
		return false, fmt.Errorf("store: join of %s to %s: %w", uid, gid, err)
	}
	return n == 1, nil
}

// ClearJoining drops the notes of MarkJoining: the join was not written,
// or the member is being removed, after which a join is a new one.
func (r *Redis) ClearJoining(ctx context.Context, gid string, uids ...string) error {
	if len(uids) == 0 {
		return nil
	}
	keys := make([]string, len(uids))
	for i, uid := range uids {
		keys[i] = joiningKey(gid, uid) // one slot: the keys of a group share its hash tag
	}
	if err := r.client.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("store: clear joins to %s: %w", gid, err)
	}
	return nil
}

// MarkLeaving notes, for ttl, that a leave of uid from gid was written,
// ending their stretch that began at joined at the group position pos, and
// drops the note of their join (MarkJoining), after which a join is a new
// one. Until the member projector has the leave, uid reads as a member from
// joined: an add of uid then is a join all the same, a second removal
// writes no second leave (Leaving), and a send is refused (BeginSend). A
// join written after the leave drops the note (ClearLeaving).
func (r *Redis) MarkLeaving(ctx context.Context, gid, uid string, joined, pos int64, ttl time.Duration) error {
	err := r.execPipe(ctx, func(p redis.Pipeliner) {
		p.Del(ctx, joiningKey(gid, uid))
		p.Set(ctx, leavingKey(gid, uid), strconv.FormatInt(joined, 10)+":"+strconv.FormatInt(pos, 10), ttl)
	})
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

// ClearLeaving drops the notes of MarkLeaving: a join was written after the
// leave.
func (r *Redis) ClearLeaving(ctx context.Context, gid string, uids ...string) error {
	if len(uids) == 0 {
		return nil
	}
	keys := make([]string, len(uids))
	for i, uid := range uids {
		keys[i] = leavingKey(gid, uid)
	}
	if err := r.client.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("store: clear leaves from %s: %w", gid, err)
	}
	return nil
}
