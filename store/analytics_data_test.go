package store

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

// analyticsData is a small chat history: the records of the four topics,
// each with its position, in the order the topics hold them.
type analyticsData struct {
	msgs     map[int32][]schema.Message // by partition, in offset order
	members  []MemberRow                // chat.members after compaction: what the stores get
	history  []MemberRow                // every member event: what happened
	acks     []AckRow
	receipts []ReceiptRow
}

// The groups of analyticsData: in solo one member talks to themself; lurk
// holds msgid 0 of partition 1, which a member never reads; the others
// share the two partitions, so their msgids interleave.
var analyticsGroups = []string{"g0", "g1", "g2", "g3", "g4"}

func analyticsPartition(gid string) int32 {
	switch gid {
	case "solo":
		return 0
	case "lurk":
		return 1
	}
	return int32(gid[1]-'0') % 2
}

// newAnalyticsData simulates five days of chat from just before a
// month's end: users join, leave and rejoin; members send, ack (mostly up to the
// head, sometimes less, as a second device does) and read, at random.
func newAnalyticsData(seed uint64) *analyticsData {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	d := &analyticsData{msgs: make(map[int32][]schema.Message)}
	var (
		msgNext, memberNext, ackNext, receiptNext [2]int64 // next offset per partition of each topic
		clock                                     = time.Date(2024, 1, 30, 18, 0, 0, 0, time.UTC).UnixMilli()
		members                                   = make(map[string]map[string]Membership) // now
		sent                                      = make(map[string][]int64)               // msgids by group
	)
	head := func(p int32) int64 { return msgNext[p] - 1 }
	change := func(gid, uid string, op schema.MemberOp) {
		p := analyticsPartition(gid)
		ev := schema.Member{Gid: gid, Uid: uid, Op: op, Pos: head(p), At: clock, By: "admin"}
		if op == schema.OpLeave {
			ev.HasJoined, ev.Joined = true, members[gid][uid].JoinedAt
		}
		d.history = append(d.history, MemberRow{ev, p, memberNext[p]})
		memberNext[p]++
		if members[gid] == nil {
			members[gid] = make(map[string]Membership)
		}
		members[gid][uid] = members[gid][uid].Apply(ev)
	}
	joined := func(gid string) []string {
		var uids []string
		for uid, m := range members[gid] {
			if m.State == MemberJoined {
				uids = append(uids, uid)
			}
		}
		sort.Strings(uids)
		return uids
	}
	send := func(gid, sender string) {
		p := analyticsPartition(gid)
		m := schema.Message{
			Gid: gid, Sender: sender, ClientMsgID: fmt.Sprintf("c%d", len(sent[gid])),
			SentAt: clock, Body: []byte("hi"), MsgID: msgNext[p],
		}
		msgNext[p]++
		d.msgs[p] = append(d.msgs[p], m)
		sent[gid] = append(sent[gid], m.MsgID)
	}
	// upto picks a message the member may ack or read: mostly the newest.
	upto := func(gid, uid string) (int64, bool) {
		ids := sent[gid]
		first, _ := slices.BinarySearch(ids, members[gid][uid].JoinedAt+1)
		if first == len(ids) {
			return 0, false
		}
		if rng.IntN(4) == 0 {
			return ids[first+rng.IntN(len(ids)-first)], true
		}
		return ids[len(ids)-1], true
	}

	change("solo", "u0", schema.OpJoin)
	for range 3 {
		clock += 1000
		send("solo", "u0")
	}
	change("lurk", "u0", schema.OpJoin)
	change("lurk", "u1", schema.OpJoin)
	send("lurk", "u0")
	for i, gid := range analyticsGroups {
		for k := range 3 {
			change(gid, fmt.Sprintf("u%d", (i+k*3)%10), schema.OpJoin)
		}
	}
	for range 1500 {
		clock += 1000 * (1 + rng.Int64N(600))
		gid := analyticsGroups[rng.IntN(len(analyticsGroups))]
		p := analyticsPartition(gid)
		in := joined(gid)
		uid := in[rng.IntN(len(in))]
		switch r := rng.IntN(100); {
		case r < 35:
			send(gid, uid)
		case r < 60:
			if id, ok := upto(gid, uid); ok {
				d.acks = append(d.acks, AckRow{schema.Ack{Gid: gid, Uid: uid, Upto: id, At: clock}, p, ackNext[p]})
				ackNext[p]++
			}
		case r < 85:
			if id, ok := upto(gid, uid); ok {
				d.receipts = append(d.receipts, ReceiptRow{schema.Receipt{Gid: gid, Uid: uid, Upto: id, At: clock}, p, receiptNext[p]})
				receiptNext[p]++
			}
		case r < 93:
			var out []string
			for u := range 10 {
				if uid := fmt.Sprintf("u%d", u); members[gid][uid].State != MemberJoined {
					out = append(out, uid)
				}
			}
			if len(out) > 0 {
				change(gid, out[rng.IntN(len(out))], schema.OpJoin)
			}
		default:
			if len(in) > 2 {
				change(gid, uid, schema.OpLeave)
			}
		}
	}
	d.members = compactSome(d.history)
	return d
}

// compactSome compacts every other member whose events are a join and
// then a leave, and every other member who left and rejoined, as
// compaction of chat.members does: it keeps a key's newest record. The
// stores then know the first by their leave alone, and the second by
// their last join alone, their earlier stretches gone.
func compactSome(history []MemberRow) []MemberRow {
	type key struct{ gid, uid string }
	events := map[key][]int{}
	for i, ev := range history {
		k := key{ev.Gid, ev.Uid}
		events[k] = append(events[k], i)
	}
	drop := map[int]bool{}
	left, rejoined := 0, 0
	for i, ev := range history { // in history's order, so the choice is fixed
		is := events[key{ev.Gid, ev.Uid}]
		if i != is[len(is)-1] {
			continue // once a key, at its newest record
		}
		switch {
		case len(is) == 2 && ev.Op == schema.OpLeave:
			if left%2 == 0 {
				drop[is[0]] = true
			}
			left++
		case len(is) > 2 && ev.Op == schema.OpJoin:
			if rejoined%2 == 0 {
				for _, j := range is[:len(is)-1] {
					drop[j] = true
				}
			}
			rejoined++
		}
	}
	var kept []MemberRow
	for i, ev := range history {
		if !drop[i] {
			kept = append(kept, ev)
		}
	}
	return kept
}

// chunks calls f with consecutive runs of 1 to 40 rows of n, and, for about
// a third of them, again with a suffix of the run: a consumer that crashed
// before its commit replays from its last committed offset.
func chunks(rng *rand.Rand, n int, f func(lo, hi int)) {
	for lo := 0; lo < n; {
		hi := min(n, lo+1+rng.IntN(40))
		f(lo, hi)
		if rng.IntN(3) == 0 {
			f(lo+rng.IntN(hi-lo), hi)
		}
		lo = hi
	}
}

// write inserts d into ClickHouse through the store's Insert methods and
// folds it into Redis, each topic in its own order and in runs, with
// replays, as the persister and the projectors do.
func (d *analyticsData) write(t *testing.T, c *ClickHouse, r *Redis, seed uint64) {
	t.Helper()
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(seed, 0xd1ce))
	parts := slices.Sorted(maps.Keys(d.msgs))
	for _, p := range parts {
		msgs := d.msgs[p]
		chunks(rng, len(msgs), func(lo, hi int) {
			if err := c.InsertMessages(ctx, p, msgs[lo:hi]); err != nil {
				t.Fatalf("InsertMessages: %v", err)
			}
			if err := r.AppendWindow(ctx, nil, msgs[lo:hi]); err != nil {
				t.Fatalf("AppendWindow: %v", err)
			}
		})
	}
	chunks(rng, len(d.members), func(lo, hi int) {
		rows := d.members[lo:hi]
		if err := c.InsertMembers(ctx, rows); err != nil {
			t.Fatalf("InsertMembers: %v", err)
		}
		ms := make([]schema.Member, len(rows))
		for i := range rows {
			ms[i] = rows[i].Member
		}
		if err := r.ApplyMembers(ctx, ms); err != nil {
			t.Fatalf("ApplyMembers: %v", err)
		}
	})
	// Cursor writes commute: the two partitions' runs arrive interleaved.
	acks, receipts := slices.Clone(d.acks), slices.Clone(d.receipts)
	rng.Shuffle(len(acks), func(i, j int) { acks[i], acks[j] = acks[j], acks[i] })
	rng.Shuffle(len(receipts), func(i, j int) { receipts[i], receipts[j] = receipts[j], receipts[i] })
	chunks(rng, len(acks), func(lo, hi int) {
		rows := acks[lo:hi]
		if err := c.InsertAcks(ctx, rows); err != nil {
			t.Fatalf("InsertAcks: %v", err)
		}
		evs := make([]schema.Ack, len(rows))
		for i := range rows {
			evs[i] = rows[i].Ack
		}
		if err := r.AdvanceAcks(ctx, evs); err != nil {
			t.Fatalf("AdvanceAcks: %v", err)
		}
	})
	chunks(rng, len(receipts), func(lo, hi int) {
		rows := receipts[lo:hi]
		if err := c.InsertReceipts(ctx, rows); err != nil {
			t.Fatalf("InsertReceipts: %v", err)
		}
		evs := make([]schema.Receipt, len(rows))
		for i := range rows {
			evs[i] = rows[i].Receipt
		}
		if err := r.AdvanceReads(ctx, evs); err != nil {
			t.Fatalf("AdvanceReads: %v", err)
		}
	})
}

// analyticsTruth answers the cookbook's questions from the records alone.
type analyticsTruth struct {
	msgs           map[string][]schema.Message       // by gid, in msgid order
	events         map[string]map[string][]MemberRow // by gid, uid, in offset order
	acks, receipts cursorLog
}

// cursorLog holds ack or receipt events by gid and uid.
type cursorLog map[string]map[string][]cursorEvent

type cursorEvent struct{ upto, at int64 }

func (l cursorLog) add(gid, uid string, upto, at int64) {
	if l[gid] == nil {
		l[gid] = make(map[string][]cursorEvent)
	}
	l[gid][uid] = append(l[gid][uid], cursorEvent{upto, at})
}

// cursor is the largest upto of the member's events.
func (l cursorLog) cursor(gid, uid string) (c int64, ok bool) {
	for i, ev := range l[gid][uid] {
		if i == 0 || ev.upto > c {
			c, ok = ev.upto, true
		}
	}
	return c, ok
}

func (d *analyticsData) truth() *analyticsTruth {
	tr := &analyticsTruth{
		msgs:   make(map[string][]schema.Message),
		events: make(map[string]map[string][]MemberRow),
		acks:   make(cursorLog), receipts: make(cursorLog),
	}
	for _, msgs := range d.msgs {
		for _, m := range msgs {
			tr.msgs[m.Gid] = append(tr.msgs[m.Gid], m)
		}
	}
	for _, ev := range d.history {
		if tr.events[ev.Gid] == nil {
			tr.events[ev.Gid] = make(map[string][]MemberRow)
		}
		tr.events[ev.Gid][ev.Uid] = append(tr.events[ev.Gid][ev.Uid], ev)
	}
	// A member known by their last join alone, compaction having taken
	// their earlier stretches (a leave names its join, a join nothing
	// before it), is a member from that join on: all the stores can know.
	kept := map[[2]string][]MemberRow{}
	for _, ev := range d.members {
		k := [2]string{ev.Gid, ev.Uid}
		kept[k] = append(kept[k], ev)
	}
	for k, evs := range kept {
		if len(evs) == 1 && evs[0].Op == schema.OpJoin && len(tr.events[k[0]][k[1]]) > 1 {
			tr.events[k[0]][k[1]] = evs
		}
	}
	for _, a := range d.acks {
		tr.acks.add(a.Gid, a.Uid, a.Upto, a.At)
	}
	for _, r := range d.receipts {
		tr.receipts.add(r.Gid, r.Uid, r.Upto, r.At)
	}
	return tr
}

func (tr *analyticsTruth) gids() []string { return slices.Sorted(maps.Keys(tr.msgs)) }

// memberAt reports whether uid was a member of gid when msgid was sent:
// the membership folded from the events that happened before it (pos <
// msgid) sees it.
func (tr *analyticsTruth) memberAt(gid, uid string, msgid int64) bool {
	var m Membership
	for _, ev := range tr.events[gid][uid] {
		if ev.Pos < msgid {
			m = m.Apply(ev.Member)
		}
	}
	return m.Sees(msgid)
}

// current is the membership folded from every event.
func (tr *analyticsTruth) current(gid, uid string) Membership {
	var m Membership
	for _, ev := range tr.events[gid][uid] {
		m = m.Apply(ev.Member)
	}
	return m
}

// audience is the members of gid when m was sent, other than its sender.
func (tr *analyticsTruth) audience(m schema.Message) []string {
	var uids []string
	for uid := range tr.events[m.Gid] {
		if uid != m.Sender && tr.memberAt(m.Gid, uid, m.MsgID) {
			uids = append(uids, uid)
		}
	}
	sort.Strings(uids)
	return uids
}

// covers reports whether a cursor of uid at upto covers message msgid in
// the stretch of uid's membership that holds it: upto >= msgid and, if uid
// left after msgid was sent, upto <= the position of that leave. A cursor
// moves within its stretch (up to the head, never past a leave), and after
// a rejoin starts at the join, so a move of a later stretch is past the
// leave and covers none of the messages of the one before.
func (tr *analyticsTruth) covers(gid, uid string, msgid, upto int64) bool {
	if upto < msgid {
		return false
	}
	for _, ev := range tr.events[gid][uid] {
		if ev.Op == schema.OpLeave && ev.Pos >= msgid {
			return upto <= ev.Pos // the first leave after msgid ends its stretch
		}
	}
	return true
}

// hasRead reports whether uid read msgid in the stretch that holds it.
func (tr *analyticsTruth) hasRead(gid, uid string, msgid int64) bool {
	return slices.ContainsFunc(tr.receipts[gid][uid], func(ev cursorEvent) bool {
		return tr.covers(gid, uid, msgid, ev.upto)
	})
}

func inWindow(ms int64, from, to time.Time) bool {
	s := ms / 1000 // as the DateTime columns
	return s >= from.Unix() && s < to.Unix()
}

// quantileExact is ClickHouse's: the value at position floor(level·n) of the
// sorted values (the last one for level 1).
func quantileExact(sorted []int64, level float64) int64 {
	i := len(sorted) - 1
	if level < 1 {
		i = int(level * float64(len(sorted)))
	}
	return sorted[i]
}

// latencies answers time_to_read (receipts) and delivery_latency (acks):
// per group, the time from the sending of each message sent in [from, to)
// to the first event (at from or later) of each member of its audience
// that covers it in the stretch that holds it, and the percentiles of
// those times.
func (tr *analyticsTruth) latencies(log cursorLog) func(from, to time.Time) [][]any {
	return func(from, to time.Time) [][]any {
		var rows [][]any
		for _, gid := range tr.gids() {
			var lat []int64
			for _, m := range tr.msgs[gid] {
				if !inWindow(m.SentAt, from, to) {
					continue
				}
				for _, uid := range tr.audience(m) {
					first := int64(math.MaxInt64)
					for _, ev := range log[gid][uid] {
						if tr.covers(gid, uid, m.MsgID, ev.upto) && ev.at/1000 >= from.Unix() {
							first = min(first, ev.at)
						}
					}
					if first != math.MaxInt64 {
						lat = append(lat, first-m.SentAt)
					}
				}
			}
			if len(lat) > 0 {
				slices.Sort(lat)
				rows = append(rows, []any{gid, int64(len(lat)), quantileExact(lat, 0.5), quantileExact(lat, 0.9),
					quantileExact(lat, 0.99), lat[0], lat[len(lat)-1]})
			}
		}
		return rows
	}
}

func (tr *analyticsTruth) readCounts(gid string, from, to int64) [][]any {
	var rows [][]any
	for _, m := range tr.msgs[gid] {
		if m.MsgID < from || m.MsgID > to {
			continue
		}
		aud, readers := tr.audience(m), int64(0)
		for _, uid := range aud {
			if tr.hasRead(gid, uid, m.MsgID) {
				readers++
			}
		}
		rows = append(rows, []any{m.MsgID, m.Sender, int64(len(aud)), readers})
	}
	return rows
}

func (tr *analyticsTruth) unread(m schema.Message) [][]any {
	var rows [][]any
	for _, uid := range tr.audience(m) {
		if !tr.hasRead(m.Gid, uid, m.MsgID) {
			rows = append(rows, []any{uid})
		}
	}
	return rows
}

// dayKey is a group and a UTC day.
type dayKey struct{ gid, day string }

// perDay counts, per group and UTC day, each member's distinct upto once,
// on the day it was first reached (its least at), as the cookbook's
// queries do: of the events from a day before from (as far back as they
// look for what a correction repeats) to to, those first reached in
// [from, to).
func perDay(log cursorLog, from, to time.Time, counts map[dayKey]*[3]int64, slot int, users map[dayKey]map[string]bool) {
	back := from.Add(-24 * time.Hour)
	for gid, byUser := range log {
		for uid, evs := range byUser {
			first := make(map[int64]int64) // upto -> least at
			for _, ev := range evs {
				if !inWindow(ev.at, back, to) {
					continue
				}
				if at, ok := first[ev.upto]; !ok || ev.at < at {
					first[ev.upto] = ev.at
				}
			}
			for _, at := range first {
				if !inWindow(at, from, to) {
					continue
				}
				k := dayKey{gid, time.UnixMilli(at).UTC().Format(time.DateOnly)}
				if counts[k] == nil {
					counts[k] = new([3]int64)
				}
				counts[k][slot]++
				if users != nil {
					if users[k] == nil {
						users[k] = make(map[string]bool)
					}
					users[k][uid] = true
				}
			}
		}
	}
}

func sortedDays[V any](m map[dayKey]V) []dayKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b dayKey) int {
		return cmp.Or(strings.Compare(a.gid, b.gid), strings.Compare(a.day, b.day))
	})
}

func (tr *analyticsTruth) dailyReaders(from, to time.Time) [][]any {
	counts, readers := make(map[dayKey]*[3]int64), make(map[dayKey]map[string]bool)
	perDay(tr.receipts, from, to, counts, 0, readers)
	var rows [][]any
	for _, k := range sortedDays(counts) {
		rows = append(rows, []any{k.gid, k.day, int64(len(readers[k])), counts[k][0]})
	}
	return rows
}

func (tr *analyticsTruth) eventVolume(from, to time.Time) [][]any {
	sent := make(cursorLog) // messages as events of their sender
	for gid, msgs := range tr.msgs {
		for _, m := range msgs {
			sent.add(gid, m.Sender, m.MsgID, m.SentAt)
		}
	}
	counts := make(map[dayKey]*[3]int64) // messages, acks, receipts
	perDay(sent, from, to, counts, 0, nil)
	perDay(tr.acks, from, to, counts, 1, nil)
	perDay(tr.receipts, from, to, counts, 2, nil)
	var rows [][]any
	for _, k := range sortedDays(counts) {
		c := counts[k]
		rows = append(rows, []any{k.gid, k.day, c[0], c[1], c[2], float64(c[1]) / float64(c[0]), float64(c[2]) / float64(c[0])})
	}
	return rows
}
