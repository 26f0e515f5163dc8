package consumers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// An add of carol reads the group's head, then writes her join; alice's
// message lands in between, so it lies after carol's join position: carol
// is a member for it. The fan-out handled it before the join reached
// chat.members and pushed it to bob alone. Once it applies the join, it
// tells carol's connections to sync (and pull it); a join known in time
// is followed by no such frame.
func TestAJoinerNotPushedAMessageSentDuringTheirJoinIsToldToSync(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)
	p.online(t, "n1", "carol", "dave")
	f := &Fanout{}
	p.fanout(t, f)
	p.probe(t, n1)
	resync := string(protocol.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: protocol.ResyncJoined}))

	j, m := carolsJoinRacesAMessage(t, p, n1)
	// Not told before the member projection has her join: her sync would
	// not name the group yet.
	mid := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "the next message pushed to carol", 20*time.Second, func() bool { return n1.has("carol", "g1", mid) })
	if got := n1.frames("carol", resync); got != 0 {
		t.Fatalf("carol was told to sync %d times before her join was projected; want 0", got)
	}
	// A join in time, and a message after both, once the projection has
	// them: carol is told, dave (pushed it) is not.
	d, err := p.prod.Join(context.Background(), "g1", "dave", "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.redis.ApplyMembers(context.Background(), []schema.Member{j, d}); err != nil {
		t.Fatal(err)
	}
	after := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "the next message pushed to carol and dave", 20*time.Second, func() bool {
		return n1.has("carol", "g1", after) && n1.has("dave", "g1", after)
	})
	if n1.has("carol", "g1", m) {
		t.Fatalf("carol was pushed message %d after all: the test no longer has the fan-out miss her", m)
	}
	if got := n1.frames("carol", resync); got != 1 {
		t.Errorf("carol, a member for message %d (her join raced it) and not pushed it, got %d resync frames; want 1", m, got)
	}
	if got := n1.frames("dave", resync); got != 0 {
		t.Errorf("dave, whose join was known before the next message, got %d resync frames; want 0", got)
	}
	if s := f.Stats(); s.LateJoins != 1 {
		t.Errorf("stats %+v; want 1 late join", s)
	}
}

// A message the fan-out handles past MaxPushAge (after an outage, or a
// produce that retried that long) is not pushed; when it is its group's
// last, no later push names it as prev, and its members heard nothing.
// Once the fan-out has caught up with the log, they are told to sync. A
// stale message that a push follows in the same batch needs no telling.
func TestMembersOfAGroupWhoseLastMessageWasStaleAreToldToSync(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)
	f := &Fanout{MaxPushAge: 5 * time.Minute}
	p.fanout(t, f)
	p.probe(t, n1)
	resync := string(protocol.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: protocol.ResyncStale}))
	now := time.Now()

	// A stale message, then a fresh one, in one produce: one batch.
	msgs := []schema.Message{
		{Gid: "g1", Sender: "alice", ClientMsgID: "old-1", SentAt: now.Add(-10 * time.Minute).UnixMilli(), Body: []byte("old")},
		{Gid: "g1", Sender: "alice", ClientMsgID: "new-1", SentAt: now.UnixMilli(), Body: []byte("new")},
	}
	ids, err := p.prod.SendMessages(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the fresh message pushed", 20*time.Second, func() bool { return n1.has("bob", "g1", ids[1]) })
	if got := n1.frames("bob", resync); got != 0 {
		t.Fatalf("bob got %d resync frames for a stale message that a push followed; want 0", got)
	}

	// A stale message last: bob is told.
	old := p.say(t, "g1", "alice", "", now.Add(-10*time.Minute))
	waitFor(t, "bob told to sync", 20*time.Second, func() bool { return n1.frames("bob", resync) == 1 })
	if n1.has("bob", "g1", old) {
		t.Errorf("the stale message %d was pushed", old)
	}
	if s := f.Stats(); s.Stale != 2 {
		t.Errorf("stats %+v; want 2 stale", s)
	}
}

// A group's last stale message may end a batch long before the fan-out
// catches up with the log (a backlog of many batches): its members are
// told once it does, whichever batch that is.
func TestAStaleLastMessageOfAnEarlierBatchIsToldWhenCaughtUp(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)
	p.member(t, "g2", "alice", schema.OpJoin)
	base := p.base
	tune := base.Tune
	base.Tune = func(r *RunnerTuning) { tune(r); r.BatchSize = 1 } // a batch per record
	p.base = base
	f := &Fanout{MaxPushAge: 5 * time.Minute}
	p.fanout(t, f)
	p.probe(t, n1)
	resync := string(protocol.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: protocol.ResyncStale}))
	now := time.Now()
	ids, err := p.prod.SendMessages(context.Background(), []schema.Message{
		{Gid: "g1", Sender: "alice", ClientMsgID: "old-1", SentAt: now.Add(-10 * time.Minute).UnixMilli(), Body: []byte("old")},
		{Gid: "g2", Sender: "alice", ClientMsgID: "new-1", SentAt: now.UnixMilli(), Body: []byte("new")},
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob told to sync", 20*time.Second, func() bool { return n1.frames("bob", resync) == 1 })
	if n1.has("bob", "g1", ids[0]) {
		t.Errorf("the stale message %d was pushed", ids[0])
	}
}

// A late join waiting for the member projection waits whatever the fan-out
// forgets meanwhile (its group evicted from the prev table), and no longer
// than maxJoinWait: a join the projection never holds is told then.
func TestALateJoinWaitsForTheProjectionAndNoLonger(t *testing.T) {
	ctx := context.Background()
	pl := newPipeline(t, pipelineOpts{partitions: 1, window: 100})
	f := &Fanout{Redis: pl.redis}
	p := &fanPartition{members: newMemberTable(), prev: newPrevTable(1), staleLast: map[string]int64{}}
	p.prev.commit(map[string]int64{"g1": 10}, 10) // a message of g1 at 10 handled, then
	p.members.restoreJoins([]joinAt{{gid: "g1", uid: "carol", pos: 5}, {gid: "g1", uid: "dave", pos: 6}})
	now := time.Now()
	batch := func(at time.Time) []string {
		t.Helper()
		uids, _, err := f.projectedJoiners(ctx, p, lateJoins(p.members.takeJoins(), p.prev, at))
		if err != nil {
			t.Fatal(err)
		}
		return uids
	}
	if uids := batch(now); len(uids) != 0 {
		t.Fatalf("told %v before the projection held their joins", uids)
	}
	p.prev.commit(map[string]int64{"g2": 11, "g3": 12}, 12) // g1 evicted
	if err := pl.redis.ApplyMembers(ctx, []schema.Member{{Op: schema.OpJoin, Gid: "g1", Uid: "carol", Pos: 5}}); err != nil {
		t.Fatal(err)
	}
	if uids := batch(now); fmt.Sprint(uids) != "[carol]" {
		t.Fatalf("once her join is projected: told %v; want [carol]", uids)
	}
	// dave's join is never projected: after maxJoinWait he is told anyway.
	for _, j := range p.members.joins {
		if j.uid == "dave" {
			p.members.joins = []joinAt{{gid: j.gid, uid: j.uid, pos: j.pos, late: true, since: now.Add(-maxJoinWait)}}
		}
	}
	if uids := batch(now); fmt.Sprint(uids) != "[dave]" || len(p.members.joins) != 0 {
		t.Fatalf("a join waiting past maxJoinWait: told %v, %d still waiting; want [dave], none", uids, len(p.members.joins))
	}
}

// A join that raced a message and reached the fan-out after the
// partition's last batch is told without waiting for another message: in
// a quiet partition none may come for long.
func TestAJoinerIsToldToSyncWithoutAnotherMessage(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)
	p.online(t, "n1", "carol")
	f := &Fanout{}
	p.fanout(t, f)
	p.probe(t, n1)
	resync := string(protocol.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: protocol.ResyncJoined}))

	j, m := carolsJoinRacesAMessage(t, p, n1)
	if err := p.redis.ApplyMembers(context.Background(), []schema.Member{j}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "carol told to sync, no message following", 10*time.Second, func() bool { return n1.frames("carol", resync) == 1 })
	if n1.has("carol", "g1", m) {
		t.Fatalf("carol was pushed message %d after all: the test no longer has the fan-out miss her", m)
	}
	time.Sleep(2 * time.Second)
	if got := n1.frames("carol", resync); got != 1 {
		t.Errorf("carol got %d resync frames; want 1", got)
	}
}

// carolsJoinRacesAMessage adds carol to g1 with alice's message m sent
// between the join's head read and its record, and returns her join once
// the fan-out has pushed m to bob.
func carolsJoinRacesAMessage(t *testing.T, p *pipeline, n1 *fakeNode) (schema.Member, int64) {
	t.Helper()
	held, release := testserver.HoldProducesSeen(t, p.broker, topics.Members)
	joined := make(chan schema.Member, 1)
	go func() {
		m, err := p.prod.Join(context.Background(), "g1", "carol", "test")
		if err != nil {
			t.Error(err)
		}
		joined <- m
	}()
	select { // the join has read the head; its record waits
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the join's record was not produced in 10 s")
	}
	m := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "the message pushed to bob", 20*time.Second, func() bool { return n1.has("bob", "g1", m) })
	release()
	j := <-joined
	if j.Pos >= m {
		t.Fatalf("carol's join is at %d, not before message %d: the test no longer races them", j.Pos, m)
	}
	return j, m
}

// A partition let go (a rebalance, a stop) before the fan-out caught up
// with the log holds groups whose last message was too old to push: their
// members are told then, since the next owner starts past those messages.
func TestStaleGroupsAreToldWhenThePartitionIsLetGo(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)
	f := &Fanout{Redis: p.redis}
	r, err := f.Runner(p.base)
	if err != nil {
		t.Fatal(err)
	}
	r.partitions = 1 // as Run reads it, before the partitions it hands the fan-out
	resync := string(protocol.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: protocol.ResyncStale}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fp := f.partition(ctx, 0)
	waitFor(t, "the follower to read g1's members", 20*time.Second, func() bool {
		fp.members.mu.RLock()
		defer fp.members.mu.RUnlock()
		return len(fp.members.snapshot("g1")) == 2
	})
	fp.handling.Lock()
	fp.staleLast["g1"] = 1000 // as a batch leaves it, not caught up
	fp.handling.Unlock()
	cancel()
	waitFor(t, "bob told to sync", 10*time.Second, func() bool { return n1.frames("bob", resync) == 1 })
	if len(fp.staleLast) != 0 {
		t.Errorf("the partition still holds %v after telling", fp.staleLast)
	}
}
