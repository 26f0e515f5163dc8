package store

import (
	"context"
	"math"

	"github.com/redis/go-redis/v9"
)

// The window's size record (chat:{gid}:winsize) tells a read with a byte
// budget the largest member it may meet, so that it never copies more
// than one member past its budget, whatever the members' sizes: their
// average says nothing of the next ones, and a group whose oldest messages
// are tiny and the rest large would otherwise have a read take a chunk of
// large ones sized for tiny ones. Its member "max" is the bytes of the
// largest window member added since its member "since", a msgid: one
// above the group's head when the record began, so that the members the
// window held before, which it never saw, are all below since. Its member
// "upto" is the head after the last batch it accounted for. The record
// holds for the window once its floor is at or above since - 1 (those are
// trimmed; a group's first batch begins it at 0), and while the head is
// not above upto: a writer that keeps no record (a persister of a release
// before it, during a rolling update) adds members the record never saw,
// and moves the head past upto. Otherwise reads fall back to chunks that
// at most double (see windowRange), and the next batch begins the record
// again.

// noteSizes queues, ahead of the members of a group's batch, the raise of
// the record's max to the largest of them (bytes), its since, which only
// the first batch sets (prevHead + 1), and its upto to the head the batch
// gives (head): one ZADD GT, with since as -since (each batch gives a
// higher since, so the first stays), so that the record is raised before
// a reader can meet the members. A record that does not account for every
// member up to prevHead (sized false) is deleted first: it begins again.
func noteSizes(ctx context.Context, p redis.Pipeliner, gid string, bytes int, prevHead, head int64, sized bool) *redis.Cmd {
	if !sized {
		p.Del(ctx, sizeKey(gid))
	}
	return p.Do(ctx, "zadd", sizeKey(gid), "gt", bytes, "max", -(prevHead + 1), "since", head, "upto")
}

// largestMember reads the record (a ZRANGE WITHSCORES of it) for a window
// whose floor is floor and head is head: the bytes of its largest member,
// or 0 when not known (no record, members older than it may remain, or
// members newer than it were added).
func largestMember(record []redis.Z, floor, head int64) int {
	largest, since, upto := 0, int64(math.MaxInt64), int64(math.MinInt64)
	for _, z := range record {
		switch z.Member {
		case "max":
			largest = int(z.Score)
		case "since":
			since = -int64(z.Score)
		case "upto":
			upto = int64(z.Score)
		}
	}
	if since > floor+1 || head > upto {
		return 0
	}
	return largest
}
