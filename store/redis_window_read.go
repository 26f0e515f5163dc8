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

// firstChunk is how many members a read with a byte budget takes first;
// their average size tells how many more the budget has room for, up to
// what it has room for at the window's largest member, or when that is not
// known, twice as many as the read before.
const firstChunk = 32

// windowRange reads up to limit members of the window's range from lo to
// hi (as ZRANGE BYSCORE takes them; from hi down with rev), with the
// group's floor and head, in one transaction. With maxBytes > 0 it reads
// firstChunk members first, then as many as the budget has room for at
// their average size, and so on, each next read after the last member read
// and in a transaction with the floor (the highest floor read is the
// range's), so that a range of large messages is never copied whole to be
// cut afterwards. Small members first must not make the next read take the
// rest of the range whatever its size: a read takes no more than the
// budget has room for at the window's largest member (its size record),
// so that it copies at most one member past the budget; when that is not
// known, no more than twice the members of the read before, so that what
// it copies past the budget is at most its last read.
func (r *Redis) windowRange(ctx context.Context, gid, lo, hi string, limit, maxBytes int, rev bool) (WindowRange, error) {
	want := limit
	if maxBytes > 0 {
		want = min(limit, firstChunk)
	}
	members, floor, head, largest, err := r.windowRead(ctx, gid, lo, hi, want, rev, true)
	if err != nil {
		return WindowRange{}, err
	}
	wr := WindowRange{Floor: floor, Head: head}
	var taken []string
	bytes := 0
	for {
		for _, m := range members {
			if maxBytes > 0 && len(taken) > 0 && bytes+len(m) > maxBytes {
				wr.Cut = true
				break
			}
			taken, bytes = append(taken, m), bytes+len(m)
		}
		if wr.Cut || len(members) < want || len(taken) >= limit {
			break
		}
		last, err := decodeWindowID(taken[len(taken)-1])
		if err != nil {
			return WindowRange{}, err
		}
		from := "(" + strconv.FormatInt(last, 10)
		if rev {
			hi = from
		} else {
			lo = from
		}
		if largest > 0 {
			want = min(limit-len(taken), (maxBytes-bytes)*len(taken)/bytes+1, (maxBytes-bytes)/largest+1)
		} else {
			want = min(limit-len(taken), (maxBytes-bytes)*len(taken)/bytes+1, 2*want)
		}
		if members, floor, _, _, err = r.windowRead(ctx, gid, lo, hi, want, rev, false); err != nil {
			return WindowRange{}, err
		}
		// The window holds every message above the floor read with the
		// members: with the members taken before that are above it too,
		// they are a run with no hole.
		wr.Floor = max(wr.Floor, floor)
	}
	if wr.Messages, err = decodeWindowMembers(taken); err != nil {
		return WindowRange{}, err
	}
	// A late append (an old owner of the partition that stalled between
	// reading the floor and writing) adds messages the window has trimmed
	// since, and its trim removes them one command later: they are not the
	// window's, and a page built on them would repeat or skip messages.
	wr.Messages = slices.DeleteFunc(wr.Messages, func(m schema.Message) bool { return m.MsgID <= wr.Floor })
	return wr, nil
}

// windowRead reads up to count members of the window's range in one
// transaction with the group's floor, and with withHead its head (-1 when
// absent, and without withHead) and its largest member (see largestMember;
// 0 without withHead).
func (r *Redis) windowRead(ctx context.Context, gid, lo, hi string, count int, rev, withHead bool) (members []string, floor, head int64, largest int, err error) {
	args := redis.ZRangeArgs{Key: windowKey(gid), Start: lo, Stop: hi, ByScore: true, Count: int64(count)}
	if rev {
		args.Start, args.Stop, args.Rev = hi, lo, true // with Rev, Start is the high end
	}
	var rng *redis.StringSliceCmd
	var floorCmd, headCmd *redis.StringCmd
	var record *redis.ZSliceCmd
	_, err = r.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		rng = p.ZRangeArgs(ctx, args)
		floorCmd = p.Get(ctx, floorKey(gid))
		if withHead {
			headCmd = p.Get(ctx, headKey(gid))
			record = p.ZRangeWithScores(ctx, sizeKey(gid), 0, -1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, 0, 0, err
	}
	if err := rng.Err(); err != nil {
		return nil, 0, 0, 0, err
	}
	floor, head = -1, -1
	for _, v := range []struct {
		name string
		cmd  *redis.StringCmd
		to   *int64
	}{{"floor", floorCmd, &floor}, {"head", headCmd, &head}} {
		if v.cmd == nil {
			continue
		}
		id, ok, err := optionalMsgID(v.cmd)
		if err != nil {
			return nil, 0, 0, 0, fmt.Errorf("%s: %w", v.name, err)
		}
		if ok {
			*v.to = id
		}
	}
	if record != nil {
		largest = largestMember(record.Val(), floor, head)
	}
	return rng.Val(), floor, head, largest, nil
}

// decodeWindowID reads the msgid a window member begins with.
func decodeWindowID(s string) (int64, error) {
	if len(s) < 8 {
		return 0, fmt.Errorf("%w: window member of %d bytes", ErrCorruptValue, len(s))
	}
	return int64(binary.BigEndian.Uint64([]byte(s[:8]))), nil
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
