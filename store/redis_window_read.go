package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// WindowBefore returns the newest messages of the group with after < msgid
// < before, at most limit, in ascending order: what a client scrolling up
// past msgid `before` loads next. complete reports that the result is what
// the whole history would give: the window was never trimmed, or after >=
// floor, or limit messages were found (all above the floor, and so the
// newest below before). When it is false, the page must come from the
// history store.
func (r *Redis) WindowBefore(ctx context.Context, gid string, after, before int64, limit int) (msgs []schema.Message, complete bool, err error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("store: window of %q: %w, got %d", gid, ErrInvalidLimit, limit)
	}
	if before <= after+1 {
		return nil, true, nil
	}
	var rng *redis.StringSliceCmd
	var floor *redis.StringCmd
	_, err = r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		rng = p.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key:     windowKey(gid),
			Start:   "(" + strconv.FormatInt(before, 10), // with Rev, Start is the high end
			Stop:    "(" + strconv.FormatInt(after, 10),
			ByScore: true,
			Rev:     true,
			Count:   int64(limit),
		})
		floor = p.Get(ctx, floorKey(gid))
		return nil
	})
	if err = cmp.Or(rng.Err(), floor.Err(), err); err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("store: window of %q before %d: %w", gid, before, err)
	}
	fl, trimmed, err := optionalMsgID(floor)
	if err != nil {
		return nil, false, fmt.Errorf("store: window of %q: floor: %w", gid, err)
	}
	if msgs, err = decodeWindowMembers(rng.Val()); err != nil {
		return nil, false, fmt.Errorf("store: window of %q: %w", gid, err)
	}
	slices.Reverse(msgs)
	return msgs, !trimmed || after >= fl || len(msgs) == limit, nil
}

// Window returns the group's messages with msgid > after, ascending, at
// most limit. complete reports that the window holds every message of the
// group after `after` (nothing was ever trimmed, or after >= floor); when it
// is false, the messages in (after, floor] must come from the history store,
// and msgs starts above the floor.
func (r *Redis) Window(ctx context.Context, gid string, after int64, limit int) (msgs []schema.Message, complete bool, err error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("store: window of %q: %w, got %d", gid, ErrInvalidLimit, limit)
	}
	var rng *redis.StringSliceCmd
	var floor *redis.StringCmd
	_, err = r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		rng = p.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key:     windowKey(gid),
			Start:   "(" + strconv.FormatInt(after, 10),
			Stop:    "+inf",
			ByScore: true,
			Count:   int64(limit),
		})
		floor = p.Get(ctx, floorKey(gid))
		return nil
	})
	if err = cmp.Or(rng.Err(), floor.Err(), err); err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("store: window of %q: %w", gid, err)
	}
	fl, trimmed, err := optionalMsgID(floor)
	if err != nil {
		return nil, false, fmt.Errorf("store: window of %q: floor: %w", gid, err)
	}
	if msgs, err = decodeWindowMembers(rng.Val()); err != nil {
		return nil, false, fmt.Errorf("store: window of %q: %w", gid, err)
	}
	return msgs, !trimmed || after >= fl, nil
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
