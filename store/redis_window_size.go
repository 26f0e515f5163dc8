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
// window held before, which it never saw, are all below since. The record
// holds for the window once its floor is at or above since - 1 (those are
// trimmed; a group's first batch begins it at 0); until then reads fall
// back to chunks that at most double (see windowRange).

// noteSizes queues, ahead of the members of a group's batch, the raise of
// the record's max to the largest of them (bytes), and its since, which
// only the first batch sets: one ZADD GT, with since as -since (each batch
// gives a higher since, so the first stays), so that the record is raised
// before a reader can meet the members.
func noteSizes(ctx context.Context, p redis.Pipeliner, gid string, bytes int, since int64) *redis.Cmd {
	return p.Do(ctx, "zadd", sizeKey(gid), "gt", bytes, "max", -since, "since")
}

// largestMember reads the record (a ZRANGE WITHSCORES of it) for a window
// whose floor is floor: the bytes of its largest member, or 0 when not
// known (no record, or members older than it may remain).
func largestMember(record []redis.Z, floor int64) int {
	largest, since := 0, int64(math.MaxInt64)
	for _, z := range record {
		switch z.Member {
		case "max":
			largest = int(z.Score)
		case "since":
			since = -int64(z.Score)
		}
	}
	if since > floor+1 {
		return 0
	}
	return largest
}
