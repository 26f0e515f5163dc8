package store

import (
	"context"

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
