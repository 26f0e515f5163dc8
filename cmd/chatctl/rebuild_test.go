package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// workload writes groups, members (joins, a leave, a rejoin), messages,
// acks and receipts, and returns the messages sent, by gid.
func workload(t *testing.T, e *env, groups, users, perGroup int) map[string][]schema.Message {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	sent := map[string][]schema.Message{}
	members := map[string][]string{}
	for g := range groups {
		gid := fmt.Sprintf("g%d", g)
		var uids []string
		for u := range users {
			if u == 0 || rng.IntN(3) > 0 {
				uids = append(uids, fmt.Sprintf("u%d", u))
			}
		}
		members[gid] = uids
		e.mustCtl(append([]string{"groups", "create", gid}, uids...)...)
	}
	send := func(gid string, n int) {
		ms := make([]schema.Message, n)
		for i := range ms {
			uids := members[gid]
			ms[i] = schema.Message{Gid: gid, Sender: uids[rng.IntN(len(uids))], ClientMsgID: fmt.Sprintf("c%d", rng.Int64()),
				SentAt: time.Now().UnixMilli(), Body: []byte("hi")}
		}
		ids, err := e.prod.SendMessages(ctx, ms)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ms {
			ms[i].MsgID = ids[i]
		}
		sent[gid] = append(sent[gid], ms...)
	}
	cursors := func(gid string) {
		ms := sent[gid]
		for _, uid := range members[gid] {
			for range 3 { // several moves, some backwards: the projections keep the max
				upto := ms[rng.IntN(len(ms))].MsgID
				if err := e.prod.SendAcks(ctx, schema.Ack{Gid: gid, Uid: uid, Upto: upto, At: time.Now().UnixMilli()}); err != nil {
					t.Fatal(err)
				}
				if rng.IntN(2) == 0 {
					continue
				}
				if err := e.prod.SendReceipts(ctx, schema.Receipt{Gid: gid, Uid: uid, Upto: upto, At: time.Now().UnixMilli()}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for gid := range members {
		send(gid, perGroup)
		cursors(gid)
	}
	// A leave, more messages, a rejoin: membership with a gap.
	e.mustCtl("members", "remove", "g1", members["g1"][0])
	send("g1", 5)
	e.mustCtl("members", "add", "g1", members["g1"][0], "newcomer")
	members["g1"] = append(members["g1"], "newcomer")
	send("g1", 5)
	cursors("g1")
	return sent
}

// snapshot is every projection's state, as text, for comparison.
func snapshot(t *testing.T, e *env, sent map[string][]schema.Message) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	users := map[string]bool{}
	for _, gid := range slices.Sorted(maps.Keys(sent)) {
		acks, err := e.rds.AckCursors(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		reads, err := e.rds.ReadCursors(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := e.rds.Members(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := e.rds.ReadState(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		var counts []string
		for _, m := range sent[gid] {
			r, a := rs.Count(m.MsgID, m.Sender)
			counts = append(counts, fmt.Sprintf("%d:%d/%d", m.MsgID, r, a))
		}
		out[gid+" acks"] = fmt.Sprint(acks)
		out[gid+" reads"] = fmt.Sprint(reads)
		out[gid+" members"] = fmt.Sprint(ms)
		out[gid+" read counts"] = strings.Join(counts, " ")
		for uid := range ms {
			users[uid] = true
		}
	}
	for uid := range users {
		gs, err := e.rds.UserGroups(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		out[uid+" groups"] = fmt.Sprint(gs)
	}
	return out
}

func diff(want, got map[string]string) []string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			d = append(d, fmt.Sprintf("%s:\n  live    %s\n  rebuilt %s", k, want[k], got[k]))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, k+": only after the rebuild")
		}
	}
	return d
}

func TestRebuildGivesTheLiveState(t *testing.T) {
	e := newEnv(t, 4)
	ctx := context.Background()
	acks, err := (&consumers.AckProjector{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	reads, err := (&consumers.ReceiptProjector{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	members, err := (&consumers.MemberProjector{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	stops := []func(){e.start(acks), e.start(reads), e.start(members)}
	sent := workload(t, e, 12, 10, 20)
	ends := func(topic string) int64 {
		s, n, err := newAdmin(e.brokers, topics.Security{}).spans(ctx, topic, nil)
		if err != nil || len(s) == 0 {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		r     runner
		topic string
	}{{acks, "chat.acks"}, {reads, "chat.receipts"}, {members, "chat.members"}} {
		n := ends(c.topic)
		e.waitFor(c.topic+" projected", func() bool { return c.r.CaughtUp() && c.r.Stats().Records >= n })
	}
	live := snapshot(t, e, sent)

	// A running projector's state is not rebuilt under it.
	if _, err := e.ctl("rebuild", "acks"); !errors.Is(err, ErrGroupActive) {
		t.Fatalf("rebuild acks while the ack projector runs: %v, want ErrGroupActive", err)
	}
	for _, stop := range stops {
		stop()
	}
	for _, g := range []string{consumers.GroupAckProjector, consumers.GroupReceiptProjector, consumers.GroupMemberProjector} {
		e.waitGroupEmpty(g)
	}

	// Damage each projection, then rebuild it alone: the other keys and
	// everything else in Redis stay as they are.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.rc.Set(ctx, "other:app:key", "kept", 0).Err())
	must(e.rc.Set(ctx, "chat:{g0}:head", "19", 0).Err())
	must(e.rc.ZAdd(ctx, "chat:{g0}:ack", redisZ(1e9, "u0")).Err())
	must(e.rc.ZAdd(ctx, "chat:{g2}:read", redisZ(1e9, "stranger")).Err())
	must(e.rc.HDel(ctx, "chat:{g3}:members", "u0").Err())
	replayed := map[string]string{ // nothing compacted yet: a record at every offset
		"members":  fmt.Sprintf("replayed %d records in ", ends("chat.members")),
		"acks":     fmt.Sprintf("replayed %d records of chat.acks and %d of chat.members (its joins raise cursors) in ", ends("chat.acks"), ends("chat.members")),
		"receipts": fmt.Sprintf("replayed %d records of chat.receipts and %d of chat.members (its joins raise cursors) in ", ends("chat.receipts"), ends("chat.members")),
	}
	for _, p := range []string{"members", "acks", "receipts"} {
		out, errOut, err := e.ctlBoth("rebuild", p)
		if err != nil || !strings.Contains(out, "OK: Redis holds exactly what the topic says") {
			t.Fatalf("rebuild %s: %v; report:\n%s", p, err, out)
		}
		if !strings.Contains(out, replayed[p]) {
			t.Errorf("rebuild %s said:\n%s\nwant %q", p, out, replayed[p])
		}
		// Rebuilt whole and checked, the state is marked so: the
		// gateways answer on the memberships before the projector runs.
		if p == "members" {
			for part := range 4 {
				if err := e.rds.CheckReplayed(ctx, consumers.GroupMemberProjector, topics.Members, part); err != nil {
					t.Errorf("after rebuild members, partition %d: %v; want marked replayed", part, err)
				}
			}
		}
		// The two walks of every key, which show no count, are said.
		wipe, check := strings.Index(errOut, "wiping "+p), strings.Index(errOut, "checking the rebuilt "+p)
		if wipe < 0 || check < wipe {
			t.Fatalf("rebuild %s said on stderr:\n%s\nwant the wipe, then the check, announced", p, errOut)
		}
	}
	if d := diff(live, snapshot(t, e, sent)); len(d) > 0 {
		t.Fatalf("after rebuilding damaged projections, %d differences from the live state:\n%s", len(d), strings.Join(d, "\n"))
	}
	for k, want := range map[string]string{"other:app:key": "kept", "chat:{g0}:head": "19"} {
		if got, err := e.rc.Get(ctx, k).Result(); err != nil || got != want {
			t.Fatalf("%s = %q (%v) after the rebuilds, want %q untouched", k, got, err, want)
		}
	}

	// Redis wiped whole: the three rebuilds give the live state back.
	must(e.rc.FlushAll(ctx).Err())
	for _, p := range []string{"acks", "receipts", "members"} { // any order: cursors commute
		if out := e.mustCtl("rebuild", p); !strings.Contains(out, "OK:") {
			t.Fatalf("rebuild %s report:\n%s", p, out)
		}
	}
	if d := diff(live, snapshot(t, e, sent)); len(d) > 0 {
		t.Fatalf("after rebuilding a wiped Redis, %d differences from the live state:\n%s", len(d), strings.Join(d, "\n"))
	}

	// The projector goes on from where the rebuild left it: nothing is
	// replayed, and a new ack is applied.
	acks, err = (&consumers.AckProjector{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	e.start(acks)
	e.waitFor("the ack projector to catch up", acks.CaughtUp)
	last, err := e.prod.SendMessage(ctx, &schema.Message{Gid: "g0", Sender: "u0", SentAt: time.Now().UnixMilli(), Body: []byte("x")})
	must(err)
	must(e.prod.SendAcks(ctx, schema.Ack{Gid: "g0", Uid: "u0", Upto: last, At: time.Now().UnixMilli()}))
	e.waitFor("the new ack", func() bool {
		c, ok, err := e.rds.AckCursor(ctx, "g0", "u0")
		return err == nil && ok && c == last && acks.Stats().Records > 0
	})
	if n := acks.Stats().Records; n != 1 {
		t.Fatalf("the restarted ack projector handled %d records, want only the new one (it resumes at the rebuild's end)", n)
	}
}

func TestRebuildRefusesUnknownProjection(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := e.ctl("rebuild", "window"); err == nil || !strings.Contains(err.Error(), "want acks, receipts or members") {
		t.Fatalf("rebuild window: %v", err)
	}
	delete(e.vars, "CHAT_REDIS_ADDRS")
	if _, err := e.ctl("rebuild", "acks"); err == nil || !strings.Contains(err.Error(), "CHAT_REDIS_ADDRS") {
		t.Fatalf("rebuild without Redis: %v, want one naming CHAT_REDIS_ADDRS", err)
	}
}

// Two devices of bob read up to the newest and then to an older message,
// while the projector was stopped. The rebuild gives the newest; it must
// also append it again, as the live projector does, or once compaction has
// kept only the older record a second rebuild moves the cursor back.
func TestRebuildKeepsACursorTheLogLeftBehindThroughCompaction(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	e.mustCtl("groups", "create", "g", "alice", "bob")
	var last int64
	for i := range 10 {
		id, err := e.prod.SendMessage(ctx, &schema.Message{Gid: "g", Sender: "alice", SentAt: time.Now().UnixMilli(), Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	for _, upto := range []int64{last, last - 4} {
		if err := e.prod.SendReceipts(ctx, schema.Receipt{Gid: "g", Uid: "bob", Upto: upto, At: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
	}
	// another member's read, so that bob's records are not in the active
	// segment, which compaction never cleans
	if err := e.prod.SendReceipts(ctx, schema.Receipt{Gid: "g", Uid: "alice", Upto: last, At: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	e.mustCtl("rebuild", "members")
	out := e.mustCtl("rebuild", "receipts")
	if !strings.Contains(out, "appended 1 cursors") {
		t.Fatalf("the rebuild appended nothing for bob:\n%s", out)
	}
	readOf := func() int64 {
		t.Helper()
		cur, err := e.rds.ReadCursors(ctx, "g")
		if err != nil {
			t.Fatal(err)
		}
		return cur["bob"]
	}
	if c := readOf(); c != last {
		t.Fatalf("after the first rebuild bob's read cursor is %d, want %d", c, last)
	}
	e.broker.Cluster().Compact()
	e.mustCtl("rebuild", "receipts")
	if c := readOf(); c != last {
		t.Fatalf("bob's read cursor moved back from %d to %d after compaction and a second rebuild", last, c)
	}
}

// The members report must notice a user whose whole group index is gone,
// not only one whose index lacks some groups.
func TestMembersReportNoticesAMissingUserIndex(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	e.mustCtl("groups", "create", "g", "alice", "bob")
	e.mustCtl("rebuild", "members")
	if err := e.rc.Del(ctx, "chat:{u:bob}:groups").Err(); err != nil {
		t.Fatal(err)
	}
	ex := newExpectation(store.ProjectionMembers)
	for _, uid := range []string{"alice", "bob"} {
		ex.memberRecords(1, func(int) schema.Member { return schema.Member{Gid: "g", Uid: uid, Op: schema.OpJoin, Pos: -1} })
	}
	rep, err := ex.check(ctx, e.rds)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ok() || !strings.Contains(rep.String(), "user index of bob: none") {
		t.Fatalf("bob's user index is gone, yet the report says:\n%s", rep)
	}
}

// A cursor rebuild replays the joins too, and the member projector raises
// joiners' cursors in the same keys: it must be stopped as well.
func TestCursorRebuildWantsTheMemberProjectorStopped(t *testing.T) {
	e := newEnv(t, 1)
	e.mustCtl("groups", "create", "g", "alice")
	m, err := (&consumers.MemberProjector{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	e.start(m)
	e.waitFor("the member projector to hold its partitions", m.CaughtUp)
	for _, p := range []string{"acks", "receipts"} {
		_, err := e.ctl("rebuild", p)
		if !errors.Is(err, ErrGroupActive) || !strings.Contains(err.Error(), consumers.GroupMemberProjector) {
			t.Fatalf("rebuild %s while the member projector runs: %v, want ErrGroupActive naming %s", p, err, consumers.GroupMemberProjector)
		}
	}
}

// cancelOn cancels when what it is written contains word.
type cancelOn struct {
	strings.Builder
	word   string
	cancel func()
}

func (c *cancelOn) Write(p []byte) (int, error) {
	n, err := c.Builder.Write(p)
	if strings.Contains(c.String(), c.word) {
		c.cancel()
	}
	return n, err
}

// A rebuild cut short after the wipe leaves the projection partly rebuilt:
// a projector started on it would replay its topic but not the joins of
// chat.members, and the joiners' cursors would be missing for good. The
// error says so, and what to do.
func TestARebuildCutShortSaysToRunItAgain(t *testing.T) {
	e := newEnv(t, 1)
	e.mustCtl("groups", "create", "g", "alice", "bob")
	if err := e.prod.SendAcks(context.Background(), schema.Ack{Gid: "g", Uid: "alice", Upto: -1, At: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOn{word: "wiped", cancel: cancel}
	err := run(ctx, []string{"rebuild", "acks"}, func(k string) string { return e.vars[k] }, out, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "chatctl rebuild acks") || !strings.Contains(err.Error(), "again") {
		t.Fatalf("rebuild cut short after the wipe: %v\n%s; want an error saying to run it again", err, out.String())
	}
}

// What compaction leaves of a removal that failed after its leaving is the
// leaving alone, which the member projector applies as the member's join
// at the position it names, raising their cursors to it. A rebuild of the
// cursors folds it the same way: before, bob's read cursor, 4 after the
// member projector's replay, was gone after `rebuild receipts`, and his
// sync counted messages from before he joined as unread.
func TestRebuildOfCursorsTakesALoneLeavingForTheJoin(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	e.mustCtl("groups", "create", "g", "alice")
	for i := range 5 {
		e.sendMessages(schema.Message{Gid: "g", Sender: "alice", SentAt: time.Now().UnixMilli(), Body: []byte(fmt.Sprint(i))})
	}
	e.mustCtl("members", "add", "g", "bob")
	ms, err := membership(ctx, newAdmin(e.brokers, topics.Security{}), "g", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.prod.Leaving(ctx, "g", "bob", ms["bob"].JoinedAt, "chatctl"); err != nil { // then the removal failed
		t.Fatal(err)
	}
	e.mustCtl("members", "add", "g", "carol") // bob's records leave the active segment
	e.broker.Cluster().Compact()
	e.mustCtl("rebuild", "members")
	live, err := e.rds.ReadCursors(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if live["bob"] != ms["bob"].JoinedAt {
		t.Fatalf("after rebuild members, bob's read cursor is %d; want his join's %d (is his join compacted away?)", live["bob"], ms["bob"].JoinedAt)
	}
	for _, p := range []string{"receipts", "acks"} {
		e.mustCtl("rebuild", p)
	}
	reads, err := e.rds.ReadCursors(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	ack, _, err := e.rds.AckCursor(ctx, "g", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if reads["bob"] != live["bob"] || ack != live["bob"] {
		t.Fatalf("after rebuilding the cursors, bob's read cursor is %d (read cursors %v) and his ack cursor %d; want %d, as the member projector's replay left them",
			reads["bob"], reads, ack, live["bob"])
	}
}
