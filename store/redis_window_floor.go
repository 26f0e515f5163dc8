package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// OlderFloors finds, for each group in below, the newest of its msgids
// below below[gid] that the history store holds (a real msgid of the
// group, so that a pull finds the floor there); groups with none are left
// out. AppendWindowOver asks it for the groups whose window starts with the
// batch: with none, a window rebuilt from a topic whose retention removed
// the group's older messages would say it holds the group's whole history,
// and a pull below it would jump over what only the history store has.
type OlderFloors func(ctx context.Context, below map[string]int64) (map[string]int64, error)

// olderFloors returns, per group of the batch, the floor older gives a group
// that has no floor and no window entry below its lowest msgid in the batch
// (-1 for the others), or nil when older is nil or no group needs one. A
// group whose lowest msgid is 0 has nothing before it to look for.
func olderFloors(ctx context.Context, msgs []schema.Message, groups [][]int, floors, lowest []int64, older OlderFloors) ([]int64, error) {
	if older == nil {
		return nil, nil
	}
	below := make(map[string]int64)
	for g, idx := range groups {
		low := msgs[idx[0]].MsgID
		for _, i := range idx {
			low = min(low, msgs[i].MsgID)
		}
		if floors[g] >= 0 || low <= 0 || (lowest[g] >= 0 && lowest[g] < low) {
			continue
		}
		below[msgs[idx[0]].Gid] = low
	}
	if len(below) == 0 {
		return nil, nil
	}
	found, err := older(ctx, below)
	if err != nil {
		return nil, err
	}
	raise := make([]int64, len(groups))
	for g, idx := range groups {
		raise[g] = -1
		gid := msgs[idx[0]].Gid
		if f, ok := found[gid]; ok && f >= 0 && f < below[gid] {
			raise[g] = f
		}
	}
	return raise, nil
}

// seedScript gives a group without a window the history store's newest
// msgid as floor, and raises its head to it. KEYS: win, floor, head; ARGV:
// the msgid. A group with a window or a floor keeps them.
var seedScript = redis.NewScript(`
local id = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('SET', KEYS[2], ARGV[1])
end
local head = tonumber(redis.call('GET', KEYS[3]) or '-1')
if id > head then
  redis.call('SET', KEYS[3], ARGV[1])
end
return 1
`)

// SeedWindows gives each group in newest, whose newest message the history
// store holds at newest[gid], a window that says so: an empty window with
// that msgid as floor and head (a group with a window or a floor keeps
// them; a head only rises). The persister seeds the groups of a partition
// when it rebuilds the windows from a log whose start retention moved: a
// group silent since before that start appears nowhere in the replay, and
// without a seed it would look as if it had no messages at all.
//
// With a fence, it writes nothing once the fence is gone, and deletes what
// it wrote if Redis lost its data meanwhile; either way it returns
// ErrStateLost.
func (r *Redis) SeedWindows(ctx context.Context, fence *Fence, newest map[string]int64) error {
	if len(newest) == 0 {
		return nil
	}
	calls := make([]scriptCall, 0, len(newest))
	keys := make([]string, 0, 3*len(newest))
	for gid, id := range newest {
		k := []string{windowKey(gid), floorKey(gid), headKey(gid)}
		calls = append(calls, scriptCall{keys: k, args: []any{id}})
		keys = append(keys, k...)
	}
	if err := r.verify(ctx, fence); err != nil {
		return fmt.Errorf("store: seed windows: %w", err)
	}
	if _, err := r.runScript(ctx, seedScript, calls); err != nil {
		return fmt.Errorf("store: seed windows: %w", err)
	}
	if err := r.verify(ctx, fence); err != nil {
		if errors.Is(err, ErrStateLost) {
			if uerr := r.undo(ctx, keys); uerr != nil {
				return fmt.Errorf("store: seed windows: %w; deleting what went into the wiped Redis failed: %v", err, uerr)
			}
		}
		return fmt.Errorf("store: seed windows: %w", err)
	}
	return nil
}
