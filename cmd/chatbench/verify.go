package main

import (
	"slices"
)

// lossCheck is the verdict of the loss check: every online member must have
// been handed every accepted message of its groups exactly once, in msgid
// order.
type lossCheck struct {
	OK                bool  `json:"ok"`
	Members           int   `json:"members"`
	Expected          int64 `json:"expected"`            // (online member, accepted message of its group) pairs
	Delivered         int64 `json:"delivered"`           // OnMessage calls
	Missing           int64 `json:"missing"`             // expected but never handed over, after the final pull
	MissingAfterDrain int64 `json:"missing_after_drain"` // the same before the final pull: found only by that pull
	Duplicates        int64 `json:"duplicates"`          // a msgid handed to a member twice
	OutOfOrder        int64 `json:"out_of_order"`        // a msgid handed after a larger one of its group
	Unexpected        int64 `json:"unexpected"`          // handed over but not accepted (a send that failed yet got in)
	Foreign           int64 `json:"foreign"`             // bodies not written by this run
	PullRounds        int   `json:"pull_rounds"`         // final Open rounds it took (each pulls the groups still missing messages)

	incomplete []slot // still missing messages
}

// check compares what each member was handed with the accepted sends of
// its groups. It may run while messages still arrive.
func (b *bench) check() lossCheck {
	b.accMu.Lock()
	accepted := make([][]int64, len(b.accepted))
	for g, ids := range b.accepted {
		accepted[g] = slices.Sorted(slices.Values(ids))
	}
	b.accMu.Unlock()

	l := lossCheck{Members: len(b.members), Foreign: b.foreign.Load()}
	for i, m := range b.members {
		m.mu.Lock()
		for _, g := range b.plan.groupsOf[m.user] {
			got := m.got[b.plan.gids[g]]
			l.Expected += int64(len(accepted[g]))
			l.Delivered += int64(len(got))
			for i := 1; i < len(got); i++ {
				if got[i] < got[i-1] {
					l.OutOfOrder++
				}
			}
			sorted := slices.Sorted(slices.Values(got))
			uniq := slices.Compact(sorted)
			l.Duplicates += int64(len(got) - len(uniq))
			miss, extra := diff(accepted[g], uniq)
			l.Missing += miss
			if miss > 0 {
				l.incomplete = append(l.incomplete, slot{i, g})
			}
			l.Unexpected += extra
		}
		m.mu.Unlock()
	}
	l.OK = l.Missing == 0 && l.Duplicates == 0 && l.OutOfOrder == 0
	return l
}

// diff counts the elements of want missing from got and those of got not
// in want; both are sorted without repeats.
func diff(want, got []int64) (missing, extra int64) {
	i, j := 0, 0
	for i < len(want) && j < len(got) {
		switch {
		case want[i] == got[j]:
			i++
			j++
		case want[i] < got[j]:
			missing++
			i++
		default:
			extra++
			j++
		}
	}
	return missing + int64(len(want)-i), extra + int64(len(got)-j)
}
