package consumers

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// fakeNode is a gateway node: it subscribes to its pushes and keeps them
// per recipient, in the order they came.
type fakeNode struct {
	name string
	mu   sync.Mutex
	got  map[string][]protocol.Message
	raw  map[string][]string // every frame, as sent
}

func subscribeNode(t testing.TB, r *store.Redis, name string) *fakeNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := r.SubscribePushes(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	n := &fakeNode{name: name, got: map[string][]protocol.Message{}, raw: map[string][]string{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range ch {
			for _, it := range b.Items {
				var m protocol.Message
				if err := json.Unmarshal(it.Msg, &m); err != nil {
					t.Errorf("node %s: push %q: %v", name, it.Msg, err)
				}
				n.mu.Lock()
				for _, uid := range it.Uids {
					n.got[uid] = append(n.got[uid], m)
					n.raw[uid] = append(n.raw[uid], string(it.Msg))
				}
				n.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return n
}

// pushed returns what uid got of gid.
func (n *fakeNode) pushed(uid, gid string) []protocol.Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []protocol.Message
	for _, m := range n.got[uid] {
		if m.Gid == gid {
			out = append(out, m)
		}
	}
	return out
}

// frames returns the frames uid got that are exactly frame.
func (n *fakeNode) frames(uid, frame string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, f := range n.raw[uid] {
		if f == frame {
			c++
		}
	}
	return c
}

func (n *fakeNode) has(uid, gid string, msgid int64) bool {
	return slices.ContainsFunc(n.pushed(uid, gid), func(m protocol.Message) bool { return m.MsgID == msgid })
}

// prevOf renders a push's prev: "unknown" or the msgid.
func prevOf(m protocol.Message) string {
	if m.Prev == nil {
		return "unknown"
	}
	return fmt.Sprint(*m.Prev)
}

// wantPushes checks that uid got exactly the messages ids of gid, in order,
// with the prevs given ("unknown" or a msgid).
// noneBefore is the expected prev of a group's first message ever where
// the fan-out may or may not know there was none: it knows when it read the
// partition from its first record, and whether it did depends on when it
// joined (a new fan-out group starts at the end).
const noneBefore = "-1 or unknown"

func wantPushes(t *testing.T, n *fakeNode, uid, gid string, ids []int64, prevs []string) {
	t.Helper()
	got := n.pushed(uid, gid)
	var gotIDs []int64
	var gotPrevs []string
	for _, m := range got {
		gotIDs = append(gotIDs, m.MsgID)
		gotPrevs = append(gotPrevs, prevOf(m))
	}
	prevOK := func(got, want string) bool {
		return got == want || want == noneBefore && (got == "-1" || got == "unknown")
	}
	if !slices.Equal(gotIDs, ids) || prevs != nil && !slices.EqualFunc(gotPrevs, prevs, prevOK) {
		t.Errorf("%s on %s got %s msgids %v prevs %v; want %v prevs %v", uid, n.name, gid, gotIDs, gotPrevs, ids, prevs)
	}
}

func (p *pipeline) fanout(t *testing.T, f *Fanout) (*Runner[schema.Message], func()) {
	t.Helper()
	if f.Redis == nil {
		f.Redis = p.redis
	}
	if f.MaxPushAge == 0 {
		f.MaxPushAge = time.Hour // a slow machine must not make a test's messages stale
	}
	r, err := f.Runner(p.base)
	if err != nil {
		t.Fatal(err)
	}
	return r, start(t, r.Run)
}

func (p *pipeline) say(t *testing.T, gid, sender, cmid string, sentAt time.Time) int64 {
	t.Helper()
	if cmid == "" {
		cmid = fmt.Sprint("c", cmidSeq.Add(1))
	}
	m := schema.Message{Gid: gid, Sender: sender, ClientMsgID: cmid, SentAt: sentAt.UnixMilli(), Body: []byte(sender + " in " + gid)}
	id, err := p.prod.SendMessage(context.Background(), &m)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// member writes a join, or a leave naming the join member wrote last.
func (p *pipeline) member(t *testing.T, gid, uid string, op schema.MemberOp) schema.Member {
	t.Helper()
	key := string(schema.MemberKey(gid, uid))
	var m schema.Member
	var err error
	if op == schema.OpJoin {
		m, err = p.prod.Join(context.Background(), gid, uid, "test")
		p.joins[key] = m.Pos
	} else {
		m, err = p.prod.Leave(context.Background(), gid, uid, p.joins[key], "test")
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (p *pipeline) online(t *testing.T, node string, uids ...string) {
	t.Helper()
	if err := p.redis.SetOnline(context.Background(), node, uids, time.Hour, true); err != nil {
		t.Fatal(err)
	}
}

// gidIn returns a gid with prefix that lands in partition part.
func gidIn(prefix string, part, parts int) string {
	for i := 0; ; i++ {
		if gid := fmt.Sprint(prefix, i); topics.Partition(gid, parts) == part {
			return gid
		}
	}
}

// probe sends to a probe group in every partition until n has got a push of
// each: a new fan-out group starts at the end of each partition as its
// reader first finds it, so only then is every later message sure to be
// handled.
func (p *pipeline) probe(t *testing.T, n *fakeNode) {
	t.Helper()
	var gids []string
	for part := range p.parts {
		gid := gidIn("probe-", part, p.parts)
		gids = append(gids, gid)
		p.member(t, gid, "prober", schema.OpJoin)
	}
	p.online(t, n.name, "prober")
	var last time.Time
	waitFor(t, "the fan-out to push on every partition", 40*time.Second, func() bool {
		send := time.Since(last) > 250*time.Millisecond
		all := true
		for _, gid := range gids {
			if len(n.pushed("prober", gid)) == 0 {
				all = false
				if send {
					p.say(t, gid, "prober", "", time.Now())
				}
			}
		}
		if send {
			last = time.Now()
		}
		return all
	})
}

func TestFanoutPushesToOnlineMembersInOrderWithPrev(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 2})
	g1, g2 := gidIn("g", 0, 2), gidIn("g", 1, 2) // one group in each partition
	for _, uid := range []string{"alice", "bob", "carol", "dave"} {
		p.member(t, g1, uid, schema.OpJoin)
	}
	for _, uid := range []string{"alice", "bob"} {
		p.member(t, g2, uid, schema.OpJoin)
	}
	n1, n2 := subscribeNode(t, p.redis, "n1"), subscribeNode(t, p.redis, "n2")
	p.online(t, "n1", "alice", "bob", "dave", "erin")
	p.online(t, "n2", "bob") // bob's second device; carol is offline
	// The follower is slow to learn of dave's leave and erin's join: the
	// fan-out must wait for it rather than push with what it knows.
	f := &Fanout{beforeApply: func(m kafka.Message) {
		if k := string(m.Key); k == g1+"/dave" || k == g1+"/erin" {
			time.Sleep(300 * time.Millisecond)
		}
	}}
	p.fanout(t, f)
	p.probe(t, n1)

	now := time.Now()
	m1 := p.say(t, g1, "alice", "", now)
	x1 := p.say(t, g2, "bob", "", now)
	m2 := p.say(t, g1, "bob", "", now)
	p.member(t, g1, "dave", schema.OpLeave)
	m3 := p.say(t, g1, "alice", "", now)
	x2 := p.say(t, g2, "alice", "", now)
	p.member(t, g1, "erin", schema.OpJoin)
	m4 := p.say(t, g1, "carol", "", now)
	waitFor(t, "the last pushes", 20*time.Second, func() bool {
		return n1.has("erin", g1, m4) && n2.has("bob", g1, m4) && n2.has("bob", g2, x2)
	})

	all := []int64{m1, m2, m3, m4}
	prevs := []string{noneBefore, fmt.Sprint(m1), fmt.Sprint(m2), fmt.Sprint(m3)}
	wantPushes(t, n1, "alice", g1, all, prevs)
	wantPushes(t, n1, "bob", g1, all, prevs)
	wantPushes(t, n2, "bob", g1, all, prevs)
	wantPushes(t, n1, "dave", g1, all[:2], prevs[:2]) // left before m3
	wantPushes(t, n1, "erin", g1, all[3:], prevs[3:]) // joined after m3
	wantPushes(t, n1, "carol", g1, nil, nil)          // offline
	wantPushes(t, n2, "carol", g1, nil, nil)
	wantPushes(t, n2, "alice", g1, nil, nil) // not on n2
	xprevs := []string{noneBefore, fmt.Sprint(x1)}
	wantPushes(t, n1, "alice", g2, []int64{x1, x2}, xprevs)
	wantPushes(t, n2, "bob", g2, []int64{x1, x2}, xprevs)
	wantPushes(t, n1, "dave", g2, nil, nil) // not a member

	got := n1.pushed("alice", g1)
	if m := got[len(got)-1]; m.Sender != "carol" || m.Body != "carol in "+g1 || !strings.HasPrefix(m.Cmid, "c") || m.SentAt != now.UnixMilli() {
		t.Errorf("push of m4 = %+v", m)
	}
	s := f.Stats()
	if s.Duplicates != 0 || s.Stale != 0 || s.Batches == 0 || s.MemberRecs < 10 {
		t.Errorf("stats %+v", s)
	}
}

// A removal writes a leaving before it reads the group's head for the
// leave (producers.Remove): a message sent between the two lies before
// the leave, but the fan-out may handle it only after the leave is
// written, and must not push it to the leaver then. From the leaving on,
// the member gets nothing past the leaving's position; a leaving of
// another stretch (a member who joined again since) changes nothing.
func TestFanoutHoldsBackFromAMemberBeingRemovedWhatFollowsTheLeaving(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1})
	const g = "g"
	for _, uid := range []string{"alice", "dave", "erin"} {
		p.member(t, g, uid, schema.OpJoin)
	}
	n1 := subscribeNode(t, p.redis, "n1")
	p.online(t, "n1", "alice", "dave", "erin")
	p.fanout(t, &Fanout{})
	p.probe(t, n1)

	ctx, now := context.Background(), time.Now()
	m1 := p.say(t, g, "alice", "", now)
	if _, err := p.prod.Leaving(ctx, g, "dave", p.joins[g+"/dave"], "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.prod.Leaving(ctx, g, "erin", p.joins[g+"/erin"]+1, "test"); err != nil { // another stretch's
		t.Fatal(err)
	}
	m2 := p.say(t, g, "alice", "", now) // sent before dave's leave is written
	p.member(t, g, "dave", schema.OpLeave)
	m3 := p.say(t, g, "alice", "", now)
	waitFor(t, "the pushes of m3", 20*time.Second, func() bool { return n1.has("erin", g, m3) })

	wantPushes(t, n1, "alice", g, []int64{m1, m2, m3}, nil)
	wantPushes(t, n1, "erin", g, []int64{m1, m2, m3}, nil)
	wantPushes(t, n1, "dave", g, []int64{m1}, nil)
}

func TestFanoutSkipsDuplicatesStaleMessagesAndWhatCameBeforeIt(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)
	now := time.Now()
	before := p.say(t, "g1", "alice", "", now) // a new fan-out group starts at the end

	f := &Fanout{MaxPushAge: 5 * time.Minute}
	p.fanout(t, f)
	p.probe(t, n1)
	m1 := p.say(t, "g1", "alice", "c-1", now)
	dup := p.say(t, "g1", "alice", "c-1", now.Add(3*time.Second)) // the client resent it
	m2 := p.say(t, "g1", "bob", "c-1", now)                       // same cmid, other sender
	old := p.say(t, "g1", "alice", "", now.Add(-10*time.Minute))
	m3 := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "the last push", 20*time.Second, func() bool { return n1.has("bob", "g1", m3) })

	// The resend is not pushed, but m2 names it as prev: the persister
	// decides it by its own clock and may keep it (its claim of m1 can
	// have expired by the time it gets there), and a client told m1 would
	// never pull it.
	wantPushes(t, n1, "bob", "g1", []int64{m1, m2, m3}, []string{"unknown", fmt.Sprint(dup), fmt.Sprint(old)})
	if n1.has("bob", "g1", before) {
		t.Errorf("message %d sent before the fan-out group existed was pushed", before)
	}
	if s := f.Stats(); s.Duplicates != 1 || s.Stale != 1 {
		t.Errorf("stats %+v, want 1 duplicate and 1 stale", s)
	}
}

// A message sent at the start of the int64 range (a broken clock, a
// record written by hand) is the oldest of all: it is stale, not pushed.
// now - sent_at overflowed for it and read as a message from the future.
func TestFanoutSkipsAMessageSentAtTheStartOfTimeAsStale(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)
	f := &Fanout{MaxPushAge: 5 * time.Minute}
	p.fanout(t, f)
	p.probe(t, n1)
	var ancient []int64
	for _, sent := range []int64{math.MinInt64, math.MinInt64 + 1000, -1 << 62} {
		ancient = append(ancient, p.sendAsU1(t, "g1", sent)(""))
	}
	m := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "the last push", 20*time.Second, func() bool { return n1.has("bob", "g1", m) })
	wantPushes(t, n1, "bob", "g1", []int64{m}, []string{fmt.Sprint(ancient[len(ancient)-1])})
	if s := f.Stats(); s.Stale != int64(len(ancient)) {
		t.Errorf("stats %+v, want %d stale", s, len(ancient))
	}
}

// TestFanoutRestartStartsPrevAfreshAndLosesNothingAfter runs no persister:
// after the restart, prev is unknown until the fan-out has seen a message
// of the group (see TestFanoutTakesPrevFromThePersister for the rest).
func TestFanoutRestartStartsPrevAfreshAndLosesNothingAfter(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)

	first := &Fanout{}
	r, stop := p.fanout(t, first)
	p.probe(t, n1)
	m1 := p.say(t, "g1", "alice", "", time.Now())
	m2 := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "m2 pushed and committed", 20*time.Second, func() bool {
		return n1.has("bob", "g1", m2) && r.Stats().Records == first.Stats().Messages
	})
	stop()

	m3 := p.say(t, "g1", "alice", "", time.Now()) // while no fan-out runs
	p.fanout(t, &Fanout{})
	m4 := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "m4 pushed", 30*time.Second, func() bool { return n1.has("bob", "g1", m4) })
	wantPushes(t, n1, "bob", "g1", []int64{m1, m2, m3, m4},
		[]string{noneBefore, fmt.Sprint(m1), "unknown", fmt.Sprint(m3)})
}

// TestFanoutPresenceAnnouncementEvictsTheCache: with a cache that trusts a
// lookup for an hour, a member who comes online still gets the next
// message, because their announcement evicts them.
func TestFanoutPresenceAnnouncementEvictsTheCache(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1})
	for _, uid := range []string{"alice", "bob", "carol"} {
		p.member(t, "g1", uid, schema.OpJoin)
	}
	n1 := subscribeNode(t, p.redis, "n1")
	p.online(t, "n1", "bob")
	f := &Fanout{PresenceTTL: time.Hour}
	p.fanout(t, f)
	p.probe(t, n1)
	m1 := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "m1 pushed", 20*time.Second, func() bool { return n1.has("bob", "g1", m1) })

	p.online(t, "n1", "carol") // announced
	waitFor(t, "carol evicted from the cache", 10*time.Second, func() bool {
		f.presence.mu.Lock()
		defer f.presence.mu.Unlock()
		return f.presence.entries["carol"].evicted != 0
	})
	m2 := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "m2 pushed", 20*time.Second, func() bool { return n1.has("bob", "g1", m2) })
	wantPushes(t, n1, "carol", "g1", []int64{m2}, []string{fmt.Sprint(m1)})
	if s := f.Stats(); s.CacheHits == 0 || s.Lookups == 0 {
		t.Errorf("stats %+v: want lookups and cache hits", s)
	}
}

// aliceAndBobOnline is one partition, group g1 of alice and bob, and bob
// online on node n1.
func aliceAndBobOnline(t *testing.T) (*pipeline, *fakeNode) {
	p := newPipeline(t, pipelineOpts{partitions: 1})
	p.member(t, "g1", "alice", schema.OpJoin)
	p.member(t, "g1", "bob", schema.OpJoin)
	n1 := subscribeNode(t, p.redis, "n1")
	p.online(t, "n1", "bob")
	return p, n1
}

// prevPipeline is one partition, groups g1 and g2 of alice and bob, and bob
// online on node n1.
func prevPipeline(t *testing.T) (*pipeline, *fakeNode) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 100})
	for _, gid := range []string{"g1", "g2"} {
		p.member(t, gid, "alice", schema.OpJoin)
		p.member(t, gid, "bob", schema.OpJoin)
	}
	n1 := subscribeNode(t, p.redis, "n1")
	p.online(t, "n1", "bob")
	return p, n1
}

// end is the offset of the last record of a one-partition pipeline.
func (p *pipeline) end(t *testing.T) int64 {
	t.Helper()
	end, err := p.prod.Head(context.Background(), "g1")
	if err != nil {
		t.Fatal(err)
	}
	return end
}

// persistedPast waits for the persister's saved position to pass offset.
func (p *pipeline) persistedPast(t *testing.T, offset int64) {
	t.Helper()
	waitFor(t, fmt.Sprint("the persister past ", offset), 20*time.Second, func() bool {
		off, err := p.redis.Offsets(context.Background(), GroupPersister, topics.Messages)
		return err == nil && off[0] > offset
	})
}

// TestFanoutTakesPrevFromThePersister: with the persister caught up, the
// first message of a group after the fan-out starts carries the exact prev,
// and the first message of a new group prev -1, so no client has to pull.
func TestFanoutTakesPrevFromThePersister(t *testing.T) {
	p, n1 := prevPipeline(t)
	p.persister(t, nil)
	m1 := p.say(t, "g1", "alice", "", time.Now())
	p.fanout(t, &Fanout{})
	p.probe(t, n1)
	p.persistedPast(t, p.end(t))
	m2 := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "m2 pushed", 20*time.Second, func() bool { return n1.has("bob", "g1", m2) })
	p.persistedPast(t, p.end(t))
	m3 := p.say(t, "g2", "alice", "", time.Now())
	waitFor(t, "m3 pushed", 20*time.Second, func() bool { return n1.has("bob", "g2", m3) })
	wantPushes(t, n1, "bob", "g1", []int64{m2}, []string{fmt.Sprint(m1)})
	wantPushes(t, n1, "bob", "g2", []int64{m3}, []string{"-1"})
}

// TestFanoutKnowsANewGroupHadNothingBeforeWithThePersisterBehind: the
// persister has stopped behind the log, yet the first message of a new
// group carries prev -1. The fan-out read every record since its
// assignment began, the persister has stored everything before that, and
// the group had nothing in between. (After a restart that begins past the
// persister, prev stays unknown: TestFanoutRestartStartsPrevAfresh.)
func TestFanoutKnowsANewGroupHadNothingBeforeWithThePersisterBehind(t *testing.T) {
	p, n1 := prevPipeline(t)
	_, stopPersister := p.persister(t, nil)
	p.fanout(t, &Fanout{})
	p.probe(t, n1)
	p.persistedPast(t, p.end(t)) // the probes, where the fan-out began
	m1 := p.say(t, "g1", "alice", "", time.Now())
	p.persistedPast(t, m1)
	stopPersister()
	m2 := p.say(t, "g1", "alice", "", time.Now())
	m3 := p.say(t, "g2", "alice", "", time.Now()) // m2 between it and the persister
	waitFor(t, "m3 pushed", 20*time.Second, func() bool { return n1.has("bob", "g2", m3) })
	wantPushes(t, n1, "bob", "g2", []int64{m3}, []string{"-1"})
	wantPushes(t, n1, "bob", "g1", []int64{m1, m2}, []string{"-1", fmt.Sprint(m1)})
}

func TestFanoutRouteSplitsLargeBatches(t *testing.T) {
	big := func(id int64) outgoing {
		return outgoing{msgid: id, json: []byte(`{"body":"` + strings.Repeat("x", 600<<10) + `"}`),
			group: []memberOf{{"u1", store.Membership{State: store.MemberJoined, JoinedAt: -1}},
				{"u2", store.Membership{State: store.MemberLeft, JoinedAt: -1, LeftAt: 1}}}}
	}
	out := []outgoing{big(1), big(2), big(3)}
	batches, pushes := route(out, map[string][]string{"u1": {"n1", "n2"}, "u2": {"n1"}})
	per := map[string][]int{}
	for _, b := range batches {
		per[b.Node] = append(per[b.Node], len(b.Batch.Items))
		if n := len(store.EncodePushBatch(b.Batch)); n > 2*maxPushPayload {
			t.Errorf("batch of %d bytes", n)
		}
	}
	// u2 left at 1: only message 1 is theirs.
	if pushes != 4 || !slices.Equal(per["n1"], []int{1, 1, 1}) || !slices.Equal(per["n2"], []int{1, 1, 1}) {
		t.Errorf("pushes %d, items per batch per node %v", pushes, per)
	}
	if u := batches[0].Batch.Items[0].Uids; batches[0].Node == "n1" && len(u) != 2 {
		t.Errorf("first item on n1 for %v, want u1 and u2", u)
	}
}

func TestClaimSetForgetsExpiredAndOldest(t *testing.T) {
	var s claimSet
	const win = 1000
	s.put("a", claim{msgid: 1, sentAt: 0}, 0, win)
	if c, ok := s.get("a", 500); !ok || c.msgid != 1 {
		t.Fatalf("get a = %v, %v", c, ok)
	}
	if _, ok := s.get("a", 5*60*1000+1); ok {
		t.Error("a claim outlived both its window and five minutes")
	}
	s.put("a", claim{msgid: 2, sentAt: 0}, 0, win) // a takes the key over
	for i := range maxClaims + 10 {
		s.put(fmt.Sprint("k", i), claim{msgid: int64(10 + i)}, 0, win)
	}
	if len(s.m) > maxClaims {
		t.Errorf("%d claims kept, limit %d", len(s.m), maxClaims)
	}
	if _, ok := s.get("a", 0); ok {
		t.Error("the oldest claim was kept past the limit")
	}
	if _, ok := s.get(fmt.Sprint("k", maxClaims+9), 0); !ok {
		t.Error("the newest claim was dropped")
	}
}

// TestAStoppedFanoutLeavesNoKafkaConnectionsBehind: the fan-out asks Kafka
// for chat.members' ends on every batch. Once its runner stops, the pool of
// those connections must go too; one left behind keeps asking a broker for
// metadata for as long as the process lives.
func TestAStoppedFanoutLeavesNoKafkaConnectionsBehind(t *testing.T) {
	p, n1 := aliceAndBobOnline(t)
	p.say(t, "g1", "alice", "", time.Now()) // the pipeline's own connections are made before
	before := testserver.GoroutinesNow()

	_, stop := p.fanout(t, &Fanout{})
	p.probe(t, n1)
	m := p.say(t, "g1", "alice", "", time.Now())
	waitFor(t, "the message pushed", 20*time.Second, func() bool { return n1.has("bob", "g1", m) })
	if len(before.Since("kafka-go.(*connPool).discover")) == 0 {
		t.Fatal("the fan-out made no pool of connections: this test no longer sees what it checks")
	}
	stop()
	before.WaitGone(t, "kafka-go.(*connPool).discover", 5*time.Second)
}
