package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// lossCheck is the verdict of the loss check: every online member must have
// been handed every accepted message of its groups exactly once, in msgid
// order, and nothing else of them but sends that failed on their client
// yet got in, which then every member must have been handed too.
type lossCheck struct {
	OK                 bool  `json:"ok"`
	Members            int   `json:"members"`
	Expected           int64 `json:"expected"`            // (online member, accepted message of its group) pairs
	Delivered          int64 `json:"delivered"`           // OnMessage calls
	Missing            int64 `json:"missing"`             // expected, and the send's body never handed over, after the final pulls
	MissingAfterDrain  int64 `json:"missing_after_drain"` // the same before the final pulls: found only by them
	MissingUnconfirmed int64 `json:"missing_unconfirmed"` // a send that failed on its client yet got in: handed to another member of the group, never to this one
	Stray              int64 `json:"stray"`               // msgids no accepted send returned, under which came no send made to the group (another group's, one never made, a garbled body)
	Renumbered         int64 `json:"renumbered"`          // the accepted msgid never handed over, but the same send's body was, under another msgid
	Duplicates         int64 `json:"duplicates"`          // a msgid handed to a member twice by one client
	Redelivered        int64 `json:"redelivered"`         // a msgid handed again by a member's next client (churn): delivered but not acked before the disconnect
	BodyDuplicates     int64 `json:"body_duplicates"`     // one send's body handed to a member under two msgids
	Altered            int64 `json:"altered"`             // a msgid handed to a member again with another body than the first time
	OutOfOrder         int64 `json:"out_of_order"`        // a msgid handed after a larger one of its group: by the same client, or first handed by a later client of the member
	Unexpected         int64 `json:"unexpected"`          // msgids handed over that no accepted send returned (a send that failed on the client yet got in, or a renumbered one)
	Mismatched         int64 `json:"mismatched"`          // an accepted msgid handed over with another send's body, or a cut or garbled one
	Foreign            int64 `json:"foreign"`             // bodies not written by this run
	NotMember          int64 `json:"not_member"`          // messages handed under a group the member is not in
	PullRounds         int   `json:"pull_rounds"`         // final Open rounds (each pulls the groups still missing messages)

	Examples    []missingExample `json:"examples,omitempty"` // a few msgids not handed over as accepted
	Faults      []string         `json:"faults,omitempty"`   // a few of the other faults, one line each
	incomplete  []slot           // still missing messages
	lastMissing bool             // checkOne found messages missing
}

// missingExample names one accepted message a member was not handed under
// its msgid, and what it got instead.
type missingExample struct {
	Gid      string `json:"gid"`
	Uid      string `json:"uid"`
	MsgID    int64  `json:"msgid"`               // what the sender was told
	Send     int32  `json:"send"`                // the send's number, in the body
	GotMsgID *int64 `json:"got_msgid,omitempty"` // the msgid the same body came with, if it came
}

// groupLog is what every member of one group must be handed.
type groupLog struct {
	accepted    []sendRef       // the accepted sends, by msgid
	failed      map[int32]bool  // the sends made to the group that failed on their client: they may have got in
	unconfirmed map[int64]int32 // msgid -> send, of the failed sends that some member was handed
}

// groupLogs is every group's log: its accepted sends, and the sends that
// failed on their client yet were handed to one of members (the first
// body a msgid came with). members' clients are closed, or their messages
// still arrive: groupLogs takes their locks.
func (b *bench) groupLogs(members []*member) []groupLog {
	logs := make([]groupLog, len(b.plan.gids))
	for g, acc := range b.acceptedSorted() {
		logs[g] = groupLog{accepted: acc, failed: map[int32]bool{}, unconfirmed: map[int64]int32{}}
	}
	b.accMu.Lock()
	for g, ks := range b.failedSends {
		maps.Copy(logs[g].failed, ks)
	}
	b.accMu.Unlock()
	for g, lg := range logs {
		if len(lg.failed) == 0 {
			continue
		}
		acc := make(map[int64]bool, len(lg.accepted))
		for _, r := range lg.accepted {
			acc[r.msgid] = true
		}
		for _, m := range members {
			m.mu.Lock()
			for _, r := range m.got[b.plan.gids[g]] {
				if _, seen := lg.unconfirmed[r.msgid]; !seen && !acc[r.msgid] && lg.failed[r.k] {
					lg.unconfirmed[r.msgid] = r.k
				}
			}
			m.mu.Unlock()
		}
	}
	return logs
}

// check compares what each member was handed with the logs of its groups.
// It may run while messages still arrive.
func (b *bench) check() lossCheck {
	logs := b.groupLogs(b.members)
	l := lossCheck{Members: len(b.members), Foreign: b.foreign.Load()}
	for i, m := range b.members {
		m.mu.Lock()
		for _, g := range b.plan.groupsOf[m.user] {
			got := m.got[b.plan.gids[g]]
			l.Expected += int64(len(logs[g].accepted))
			l.Delivered += int64(len(got))
			l.checkOne(b.plan.gids[g], b.plan.uids[m.user], logs[g], got)
			if l.lastMissing {
				l.incomplete = append(l.incomplete, slot{i, g})
			}
		}
		l.notMember(b.plan, m)
		m.mu.Unlock()
	}
	l.verdict()
	return l
}

// missing is how many messages members still miss: accepted ones, and
// those of failed sends that other members of the group were handed.
func (l *lossCheck) missing() int64 { return l.Missing + l.MissingUnconfirmed }

// verdict sets OK from the counts. Only redeliveries after churn (what a
// client had not acked), unexpected msgids (sends that failed on their
// client yet got in) and renumbered sends may be counted in a passing run:
// a renumbered send (its claim expired under overload and a resend was
// stored again; RELIABILITY.md, "renumbered sends") loses nothing and
// shows nothing twice, and is a known limit, reported, not a failure.
func (l *lossCheck) verdict() {
	l.OK = l.missing() == 0 && l.Stray == 0 && l.Mismatched == 0 && l.Duplicates == 0 && l.BodyDuplicates == 0 && l.Altered == 0 && l.OutOfOrder == 0 && l.NotMember == 0
}

// notMember counts what m was handed under a group it is not in (the
// caller holds m.mu or m's client is closed): a member must see nothing of
// another group.
func (l *lossCheck) notMember(p *plan, m *member) {
	for gid, got := range m.got {
		if !slices.ContainsFunc(p.groupsOf[m.user], func(g int) bool { return p.gids[g] == gid }) {
			l.NotMember += int64(len(got))
		}
	}
}

// acceptedSorted is a copy of every group's accepted sends by msgid.
func (b *bench) acceptedSorted() [][]sendRef {
	b.accMu.Lock()
	defer b.accMu.Unlock()
	accepted := make([][]sendRef, len(b.accepted))
	for g, refs := range b.accepted {
		accepted[g] = slices.SortedFunc(slices.Values(refs), func(x, y sendRef) int { return cmp.Compare(x.msgid, y.msgid) })
	}
	return accepted
}

// fault keeps a line about a fault for the report, the first few only.
func (l *lossCheck) fault(format string, args ...any) {
	if len(l.Faults) < 5 {
		l.Faults = append(l.Faults, fmt.Sprintf(format, args...))
	}
}

// checkOne checks one member's messages of one group against the group's
// log.
func (l *lossCheck) checkOne(gid, uid string, log groupLog, got []sendRef) {
	l.lastMissing = false
	accepted := log.accepted
	// One client hands a group's msgids ascending. A member's next client
	// (churn) starts at the ack cursor: it may hand again what the last one
	// had not acked, but what it hands for the first time must come after
	// everything the member was handed before. Whatever comes again must
	// come with the body it came with first.
	first := make(map[int64]int32, len(got)) // msgid -> the send its body was the first time
	top := int64(-1)                         // the largest msgid handed so far
	for i, r := range got {
		k, seen := first[r.msgid]
		switch {
		case i > 0 && r.gen == got[i-1].gen && r.msgid < got[i-1].msgid:
			l.OutOfOrder++
			l.fault("%s to %s: msgid %d handed after %d by the same client", gid, uid, r.msgid, got[i-1].msgid)
		case !seen && r.msgid < top:
			l.OutOfOrder++
			l.fault("%s to %s: msgid %d first handed by client %d, after an earlier client was handed %d", gid, uid, r.msgid, r.gen, top)
		}
		if seen && k != r.k {
			l.Altered++
			l.fault("%s to %s: msgid %d handed with send %d's body, then by client %d with send %d's (-1: not a body of this run)", gid, uid, r.msgid, k, r.gen, r.k)
		}
		if !seen {
			first[r.msgid] = r.k
		}
		top = max(top, r.msgid)
	}
	sorted := slices.SortedFunc(slices.Values(got), func(x, y sendRef) int {
		return cmp.Or(cmp.Compare(x.msgid, y.msgid), cmp.Compare(x.gen, y.gen))
	})
	for i := 1; i < len(sorted); i++ {
		switch {
		case sorted[i].msgid != sorted[i-1].msgid:
		case sorted[i].gen == sorted[i-1].gen:
			l.Duplicates++
		default:
			l.Redelivered++
		}
	}
	uniq := slices.CompactFunc(sorted, func(x, y sendRef) bool { return x.msgid == y.msgid })

	isAccepted := make(map[int32]bool, len(accepted)) // by send number
	for _, a := range accepted {
		isAccepted[a.k] = true
	}
	byK := make(map[int32]int64, len(uniq)) // send number -> the msgid its body came with
	for _, r := range uniq {
		if r.k < 0 {
			continue
		}
		if _, seen := byK[r.k]; seen {
			l.BodyDuplicates++
			continue
		}
		byK[r.k] = r.msgid
	}

	// notHanded accounts for accepted send a, whose msgid did not come
	// with its body: renumbered when the body came under another msgid,
	// else missing.
	notHanded := func(a sendRef) {
		ex := missingExample{Gid: gid, Uid: uid, MsgID: a.msgid, Send: a.k}
		if other, ok := byK[a.k]; ok && other != a.msgid {
			l.Renumbered++
			ex.GotMsgID = &other
		} else {
			l.Missing++
			l.lastMissing = true
		}
		if len(l.Examples) < 5 {
			l.Examples = append(l.Examples, ex)
		}
	}
	i, j := 0, 0
	for i < len(accepted) || j < len(uniq) {
		switch {
		case j == len(uniq) || i < len(accepted) && accepted[i].msgid < uniq[j].msgid:
			notHanded(accepted[i])
			i++
		case i == len(accepted) || uniq[j].msgid < accepted[i].msgid:
			l.Unexpected++
			l.unexpected(gid, uid, log, uniq[j], isAccepted)
			j++
		default: // the accepted msgid came: with the same send's body, whole?
			if uniq[j].k != accepted[i].k {
				l.Mismatched++
				notHanded(accepted[i])
			}
			i++
			j++
		}
	}
	// The failed sends that got in, as other members were handed them.
	for _, id := range slices.Sorted(maps.Keys(log.unconfirmed)) {
		if _, ok := first[id]; !ok {
			l.MissingUnconfirmed++
			l.lastMissing = true
			l.fault("%s to %s: msgid %d (send %d, failed on its client yet got in) never came; other members were handed it", gid, uid, id, log.unconfirmed[id])
		}
	}
}

// unexpected judges r, handed under a msgid no accepted send of the group
// returned: a send made to the group that failed on its client yet got in
// (under that msgid, the same body as to the other members), or an
// accepted send of the group under a second msgid (renumbered, or the same
// body under two msgids: counted by checkOne). Anything else is stray.
func (l *lossCheck) unexpected(gid, uid string, log groupLog, r sendRef, isAccepted map[int32]bool) {
	switch {
	case log.failed[r.k]:
		if k, ok := log.unconfirmed[r.msgid]; ok && k != r.k {
			l.Mismatched++
			l.fault("%s to %s: msgid %d came with send %d's body, another member got send %d's under it", gid, uid, r.msgid, r.k, k)
		}
	case isAccepted[r.k]:
	default:
		l.Stray++
		what := fmt.Sprintf("send %d's body, which was not made to this group", r.k)
		if r.k < 0 {
			what = "a body not of this run, or cut or garbled"
		}
		l.fault("%s to %s: msgid %d, which no send returned, came with %s", gid, uid, r.msgid, what)
	}
}
