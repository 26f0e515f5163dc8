package consumers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

func (p *pipeline) ackProjector(t *testing.T) (*Runner[schema.Ack], func()) {
	t.Helper()
	r, err := (&AckProjector{Redis: p.redis, ClickHouse: p.ch}).Runner(p.base)
	if err != nil {
		t.Fatal(err)
	}
	return r, start(t, r.Run)
}

func (p *pipeline) memberProjector(t *testing.T) (*Runner[schema.Member], func()) {
	t.Helper()
	r, err := (&MemberProjector{Redis: p.redis, ClickHouse: p.ch}).Runner(p.base)
	if err != nil {
		t.Fatal(err)
	}
	return r, start(t, r.Run)
}

func TestAcksOutOfOrderNeverMoveACursorBackAndReplayRebuildsThem(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 4, window: 1000, clickhouse: true})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]map[string]int64{}
	var acks []schema.Ack
	for g := 0; g < 8; g++ {
		gid := fmt.Sprintf("g%d", g)
		want[gid] = map[string]int64{}
		for u := 0; u < 6; u++ {
			uid := fmt.Sprintf("u%d", u)
			top := int64(50 + rng.IntN(50))
			want[gid][uid] = top
			for _, upto := range rng.Perm(int(top) + 1) {
				acks = append(acks, schema.Ack{Gid: gid, Uid: uid, Upto: int64(upto), At: time.Now().UnixMilli()})
			}
		}
	}
	rng.Shuffle(len(acks), func(i, j int) { acks[i], acks[j] = acks[j], acks[i] })

	_, stop := p.ackProjector(t)
	// Watch the cursors while acks flow: none may ever go down.
	seen := map[string]int64{}
	check := func() {
		for gid := range want {
			cur, err := p.redis.AckCursors(ctx, gid)
			if err != nil {
				t.Fatal(err)
			}
			for uid, c := range cur {
				k := gid + "/" + uid
				if c < seen[k] {
					t.Fatalf("cursor %s went back from %d to %d", k, seen[k], c)
				}
				seen[k] = c
			}
		}
	}
	for i := 0; i < len(acks); i += 200 {
		if err := p.prod.SendAcks(ctx, acks[i:min(i+200, len(acks))]...); err != nil {
			t.Fatal(err)
		}
		check()
	}
	done := func() bool {
		for gid, users := range want {
			cur, _ := p.redis.AckCursors(ctx, gid)
			if fmt.Sprint(cur) != fmt.Sprint(users) {
				return false
			}
		}
		return true
	}
	waitFor(t, "cursors at the highest ack", 20*time.Second, func() bool { check(); return done() })
	// ClickHouse follows Redis within an insert round.
	inClickHouse := func() bool {
		for gid, users := range want {
			got, err := p.ch.AckCursors(ctx, gid)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(users) {
				return false
			}
		}
		return true
	}
	waitFor(t, "ClickHouse cursors at the highest ack", 10*time.Second, inClickHouse)

	// Wipe Redis; the projector replays chat.acks from the start.
	stop()
	if err := p.rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.ackProjector(t)
	waitFor(t, "cursors rebuilt by replay", 20*time.Second, done)
	waitFor(t, "ClickHouse cursors unchanged by the replay", 10*time.Second, inClickHouse)
}

func TestMembersJoinAtTheHeadAndLeaveAtTheirPosition(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 2, window: 1000, clickhouse: true})
	ctx := context.Background()
	change := func(uid string, op schema.MemberOp) schema.Member { return p.member(t, "g1", uid, op) }
	sendOne := func() int64 {
		id, err := p.prod.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "alice", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	change("alice", schema.OpJoin)
	m1 := sendOne()
	bobJoin := change("bob", schema.OpJoin)
	m2 := sendOne()
	aliceLeave := change("alice", schema.OpLeave)
	m3 := sendOne()
	aliceBack := change("alice", schema.OpJoin)
	if bobJoin.Pos != m1 || aliceLeave.Pos != m2 || aliceBack.Pos != m3 {
		t.Fatalf("positions %d %d %d, want %d %d %d", bobJoin.Pos, aliceLeave.Pos, aliceBack.Pos, m1, m2, m3)
	}
	_, stop := p.memberProjector(t)
	check := func() {
		t.Helper()
		// The user index is written after the group's membership (a
		// second round trip): wait for both.
		waitFor(t, "membership", 20*time.Second, func() bool {
			a, _ := p.redis.Membership(ctx, "g1", "alice", nil)
			groups, _ := p.redis.UserGroups(ctx, "bob")
			_, indexed := groups["g1"]
			return a.State == store.MemberJoined && a.JoinedAt == m3 && indexed
		})
		b, _ := p.redis.Membership(ctx, "g1", "bob", nil)
		if b.State != store.MemberJoined || b.JoinedAt != m1 || b.Sees(m1) || !b.Sees(m2) {
			t.Fatalf("bob = %+v: want joined at %d, seeing %d but not %d", b, m1, m2, m1)
		}
		if cur, ok, _ := p.redis.AckCursor(ctx, "g1", "bob"); !ok || cur != m1 {
			t.Fatalf("bob's ack cursor = %d (%v), want the head at his join, %d", cur, ok, m1)
		}
		groups, _ := p.redis.UserGroups(ctx, "bob")
		if _, ok := groups["g1"]; !ok {
			t.Fatalf("bob's groups %v lack g1", groups)
		}
	}
	check()

	// A member who left, seen before rejoining: Sees stops at the leave.
	left := store.Membership{State: store.MemberLeft, JoinedAt: -1, LeftAt: m2}
	if !left.Sees(m2) || left.Sees(m3) {
		t.Fatalf("a member who left at %d must see %d and not %d", m2, m2, m3)
	}

	stop()
	if err := p.rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.memberProjector(t)
	check() // rebuilt by replay
}

// A member's last ack or read in the log may be below their cursor: two
// devices ack 100 and then 90 before the first is projected (the gateway
// checks each against a projection that lags). The projector then appends
// the cursor again, so that a compacted topic, which keeps only the last
// record of a member, replays to the same cursor.
func TestACursorLeftBehindInTheLogIsAppendedAgainAndSurvivesCompaction(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	now := time.Now().UnixMilli()
	for _, upto := range []int64{100, 90} {
		if err := p.prod.SendAcks(ctx, schema.Ack{Gid: "g1", Uid: "u1", Upto: upto, At: now}); err != nil {
			t.Fatal(err)
		}
		if err := p.prod.SendReceipts(ctx, schema.Receipt{Gid: "g1", Uid: "u1", Upto: upto, At: now}); err != nil {
			t.Fatal(err)
		}
	}
	cursors := func() (ack, read int64) {
		a, _, _ := p.redis.AckCursor(ctx, "g1", "u1")
		r, _ := p.redis.ReadCursors(ctx, "g1")
		return a, r["u1"]
	}
	projectors := func() (stop func()) {
		_, stopA := p.ackProjector(t)
		rr, err := (&ReceiptProjector{Redis: p.redis}).Runner(p.base)
		if err != nil {
			t.Fatal(err)
		}
		stopR := start(t, rr.Run)
		return func() { stopA(); stopR() }
	}
	stop := projectors()
	waitFor(t, "cursors at 100", 20*time.Second, func() bool { a, r := cursors(); return a == 100 && r == 100 })
	waitFor(t, "the corrections in both topics", 10*time.Second, func() bool {
		return p.topicEnd(t, topics.Acks) == 3 && p.topicEnd(t, topics.Receipts) == 3
	})
	stop()
	// Records of another member close the segment: the active one is never
	// cleaned.
	if err := p.prod.SendAcks(ctx, schema.Ack{Gid: "g1", Uid: "u2", Upto: 1, At: now}); err != nil {
		t.Fatal(err)
	}
	if err := p.prod.SendReceipts(ctx, schema.Receipt{Gid: "g1", Uid: "u2", Upto: 1, At: now}); err != nil {
		t.Fatal(err)
	}
	p.broker.Cluster().Compact()
	if err := p.rc.FlushAll(ctx).Err(); err != nil { // Redis restarted empty
		t.Fatal(err)
	}
	projectors()
	waitFor(t, "u2 replayed", 20*time.Second, func() bool {
		c, _, _ := p.redis.AckCursor(ctx, "g1", "u2")
		r, _ := p.redis.ReadCursors(ctx, "g1")
		return c == 1 && r["u2"] == 1
	})
	if a, r := cursors(); a != 100 || r != 100 {
		t.Fatalf("after compaction and a replay: ack %d, read %d; want 100 and 100, as before", a, r)
	}
}

// A replay after a reset, over the cursors it had built, appends no
// corrections: the records it hands over again are each below the cursor
// their member's later records raised, and the log holds those. Appending
// them added a receipt of the replay's day for every member at every
// batch's end (two here, for u1's three receipts), which the analysts'
// receipt_events then counted. Records past what was handled before the
// reset are still corrected. So with a reset by an older chatctl, whose
// "handled" field was a plain position ("3", not "<end>:<from>:<to>"):
// read as nothing handled, it made the replay append them.
func TestAReplayAfterAResetAppendsNoCorrections(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		by    string
		reset func(p *pipeline) error
	}{
		{"this chatctl", func(p *pipeline) error {
			return p.redis.ResetOffsets(ctx, GroupReceiptProjector, topics.Receipts, map[int]int64{0: kafka.FirstOffset})
		}},
		{"an older chatctl", func(p *pipeline) error {
			field := topics.Receipts + "/0"
			return p.rc.HSet(ctx, "chat:offsets:"+GroupReceiptProjector, field, kafka.FirstOffset, field+"/origin", "next", field+"/handled", "3").Err()
		}},
	} {
		t.Run(c.by, func(t *testing.T) {
			p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
			send := func(uptos ...int64) {
				t.Helper()
				for _, upto := range uptos {
					if err := p.prod.SendReceipts(ctx, schema.Receipt{Gid: "g1", Uid: "u1", Upto: upto, At: 1}); err != nil {
						t.Fatal(err)
					}
				}
			}
			saved := func() int64 { return p.saved(t, GroupReceiptProjector, topics.Receipts) }
			send(10, 20, 30)
			stop := p.receiptProjector(t, 1)
			waitFor(t, "the three receipts handled", 20*time.Second, func() bool { return saved() == 3 })
			stop()
			// chatctl consumer-groups reset chat.receipt-projector -to earliest
			if err := c.reset(p); err != nil {
				t.Fatal(err)
			}
			stop = p.receiptProjector(t, 1)
			defer func() { stop() }()
			waitFor(t, "the replay at the log's end", 20*time.Second, func() bool { return saved() >= 3 })
			time.Sleep(500 * time.Millisecond)
			if end := p.topicEnd(t, topics.Receipts); end != 3 {
				t.Fatalf("after a replay of u1's 3 receipts over the cursors they built, chat.receipts holds %d records; want 3", end)
			}
			// Two devices, out of order, after the replay: corrected as ever.
			send(50, 40)
			waitFor(t, "the correction of 40 by 50", 20*time.Second, func() bool { return p.topicEnd(t, topics.Receipts) == 6 })
			waitFor(t, "everything handled", 20*time.Second, func() bool { return saved() == 6 })
			if end := p.topicEnd(t, topics.Receipts); end != 6 {
				t.Fatalf("chat.receipts holds %d records after 50 then 40; want 6 (one correction)", end)
			}
		})
	}
}

// receiptProjector starts a receipt projector (writing ClickHouse when the
// pipeline has it) of batches of batchSize records at most (0: the
// default), and returns its stop.
func (p *pipeline) receiptProjector(t *testing.T, batchSize int) (stop func()) {
	t.Helper()
	base := p.base
	if batchSize > 0 {
		tune := base.Tune
		base.Tune = func(r *RunnerTuning) { tune(r); r.BatchSize = batchSize }
	}
	rr, err := (&ReceiptProjector{Redis: p.redis, ClickHouse: p.ch}).Runner(base)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, rr.Run)
}

// saved is the position consumer saved for partition 0 of topic.
func (p *pipeline) saved(t *testing.T, consumer, topic string) int64 {
	t.Helper()
	off, err := p.redis.Offsets(context.Background(), consumer, topic)
	if err != nil {
		t.Fatal(err)
	}
	return off[0]
}

// topicEnd is the end offset of partition 0 of topic.
func (p *pipeline) topicEnd(t *testing.T, topic string) int64 {
	t.Helper()
	cl := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(p.brokers()...), Timeout: 5 * time.Second}
	resp, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, po := range resp.Topics[topic] {
		return po.LastOffset
	}
	return -1
}

// A leave names the join it ends, so a former member keeps the messages they
// were a member for after compaction has dropped their join and the member
// projection is rebuilt from the topic.
func TestAFormerMembersStretchSurvivesCompactionOfTheirJoin(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	send := func() int64 {
		id, err := p.prod.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "bob", Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	p.member(t, "g1", "alice", schema.OpJoin)
	p.member(t, "g1", "bob", schema.OpJoin)
	m1 := send()
	m2 := send()
	p.member(t, "g1", "alice", schema.OpLeave)
	m3 := send()
	// carol's leave is of the form written before leaves named their join.
	p.member(t, "g1", "carol", schema.OpJoin)
	m4 := send()
	if err := p.prod.SendMembers(ctx, schema.Member{Gid: "g1", Uid: "carol", Op: schema.OpLeave, Pos: m4}); err != nil {
		t.Fatal(err)
	}
	p.member(t, "g1", "dave", schema.OpJoin) // closes the segment: the active one is never cleaned

	p.broker.Cluster().Compact()
	left := map[string]schema.Member{}
	for _, m := range p.records(t, topics.Members) {
		ev, err := schema.DecodeMember(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Op == schema.OpJoin && (ev.Uid == "alice" || ev.Uid == "carol") {
			t.Fatalf("%s's join survived compaction: the test proves nothing", ev.Uid)
		}
		left[ev.Uid] = ev
	}
	if a := left["alice"]; a.Op != schema.OpLeave || !a.HasJoined || a.Joined != -1 || a.Pos != m2 {
		t.Fatalf("alice's leave after compaction: %+v, want a leave at %d naming her join at -1", a, m2)
	}

	if err := p.rc.FlushAll(ctx).Err(); err != nil { // Redis restarted empty
		t.Fatal(err)
	}
	p.memberProjector(t)
	waitFor(t, "dave replayed", 20*time.Second, func() bool {
		d, _ := p.redis.Membership(ctx, "g1", "dave", nil)
		return d.State == store.MemberJoined
	})
	alice, err := p.redis.Membership(ctx, "g1", "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Membership{State: store.MemberLeft, JoinedAt: -1, LeftAt: m2}); alice != want {
		t.Fatalf("alice after compaction and a replay: %+v, want %+v", alice, want)
	}
	if !alice.Sees(m1) || !alice.Sees(m2) || alice.Sees(m3) {
		t.Fatalf("alice must still see %d and %d, sent while she was a member, and not %d", m1, m2, m3)
	}
	// An old leave cannot say when its member joined: it grants nothing.
	if carol, _ := p.redis.Membership(ctx, "g1", "carol", nil); carol.Sees(m4) {
		t.Fatalf("carol %+v sees %d from a leave that names no join", carol, m4)
	}
}

// records reads partition 0 of topic from its start to its end.
func (p *pipeline) records(t *testing.T, topic string) []kafka.Message {
	t.Helper()
	end := p.topicEnd(t, topic)
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: p.brokers(), Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []kafka.Message
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v after %d records", topic, err, len(out))
		}
		out = append(out, m)
		if m.Offset == end-1 {
			return out
		}
	}
}

// A member who left and rejoined has their Redis cursors raised to the
// rejoin position by the member projector. When the receipt and ack
// projectors then handle their last receipt and ack (below that position),
// as on every replay after Redis is lost, the join's raise is no cursor the
// log left behind: appending a receipt at the join position would have
// ClickHouse's read_cursors (receipts only) and the read counts say they
// read the messages of their first stretch that they never read.
func TestARejoinIsNotAppendedAsAReceiptOrAnAck(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	send := func() int64 {
		id, err := p.prod.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "bob", SentAt: time.Now().UnixMilli(), Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	p.member(t, "g1", "bob", schema.OpJoin)
	p.member(t, "g1", "alice", schema.OpJoin)
	var first []int64
	for range 5 {
		first = append(first, send())
	}
	// alice reads and acks up to the fourth message, then leaves at the fifth.
	if err := p.prod.SendReceipts(ctx, schema.Receipt{Gid: "g1", Uid: "alice", Upto: first[3], At: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if err := p.prod.SendAcks(ctx, schema.Ack{Gid: "g1", Uid: "alice", Upto: first[3], At: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	p.member(t, "g1", "alice", schema.OpLeave)
	for range 5 {
		send()
	}
	rejoin := p.member(t, "g1", "alice", schema.OpJoin)

	cursorProjectors := func() func() {
		r, err := (&ReceiptProjector{Redis: p.redis, ClickHouse: p.ch}).Runner(p.base)
		if err != nil {
			t.Fatal(err)
		}
		stopR := start(t, r.Run)
		_, stopA := p.ackProjector(t)
		return func() { stopR(); stopA() }
	}
	chCursors := func() (read, ack int64) {
		r, err := p.ch.ReadCursors(ctx, "g1")
		if err != nil {
			t.Fatal(err)
		}
		a, err := p.ch.AckCursors(ctx, "g1")
		if err != nil {
			t.Fatal(err)
		}
		return r["alice"], a["alice"]
	}
	stop := cursorProjectors()
	waitFor(t, "alice's receipt and ack in ClickHouse", 20*time.Second, func() bool {
		r, a := chCursors()
		return r == first[3] && a == first[3]
	})
	stop()
	p.memberProjector(t)
	waitFor(t, "alice rejoined", 20*time.Second, func() bool {
		m, _ := p.redis.Membership(ctx, "g1", "alice", nil)
		return m.State == store.MemberJoined && m.JoinedAt == rejoin.Pos
	})

	// Redis restarts empty; the member projector rebuilds first (chat.members
	// is short), then the cursor projectors replay.
	if err := p.rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "memberships replayed", 20*time.Second, func() bool {
		return p.redis.CheckReplayed(ctx, GroupMemberProjector, topics.Members, 0) == nil
	})
	cursorProjectors()
	waitFor(t, "cursors replayed", 20*time.Second, func() bool {
		return p.redis.CheckReplayed(ctx, GroupReceiptProjector, topics.Receipts, 0) == nil &&
			p.redis.CheckReplayed(ctx, GroupAckProjector, topics.Acks, 0) == nil
	})
	// A position is saved only once the rows before it are in ClickHouse.
	waitFor(t, "the replayed cursors' rows in ClickHouse", 20*time.Second, func() bool {
		for group, topic := range map[string]string{GroupReceiptProjector: topics.Receipts, GroupAckProjector: topics.Acks} {
			saved, err := p.redis.Offsets(ctx, group, topic)
			if err != nil || saved[0] < p.topicEnd(t, topic) {
				return false
			}
		}
		return true
	})

	for _, topic := range []string{topics.Receipts, topics.Acks} {
		if end := p.topicEnd(t, topic); end != 1 {
			t.Errorf("%s holds %d records after the replay; alice sent one", topic, end)
		}
	}
	if read, ack := chCursors(); read != first[3] || ack != first[3] {
		t.Fatalf("ClickHouse cursors of alice are read %d, ack %d after the replay, want %d (her only receipt and ack): she is counted as having read %d, sent while she was a member, which she never read",
			read, ack, first[3], first[4])
	}
}

// A member event whose position is above 2^53, written straight into
// chat.members (producers take positions from the log, far below), would
// raise the member's cursors in Redis's sorted sets, whose doubles round
// it: the cursors would never equal the join they start at. The member
// projector dead-letters it, as the cursor projectors do an ack or receipt
// above 2^53, and the group's next events are applied.
func TestAMemberEventAboveTwoToThe53IsDeadLettered(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(p.broker.Addr()), Topic: topics.Members, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	rogue := schema.Member{Gid: "g1", Uid: "rogue", Op: schema.OpJoin, Pos: schema.MaxCursor + 1, At: 1}
	if err := w.WriteMessages(ctx, kafka.Message{Key: schema.MemberKey("g1", "rogue"), Value: schema.AppendMember(nil, &rogue)}); err != nil {
		t.Fatal(err)
	}
	p.member(t, "g1", "bob", schema.OpJoin)
	r, _ := p.memberProjector(t)
	waitFor(t, "bob's join", 20*time.Second, func() bool {
		b, err := p.redis.Membership(ctx, "g1", "bob", nil)
		return err == nil && b.State == store.MemberJoined
	})
	m, err := p.redis.Membership(ctx, "g1", "rogue", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.State != store.MemberNone {
		cur, _, _ := p.redis.AckCursor(ctx, "g1", "rogue")
		t.Fatalf("the join at %d was applied: %+v, ack cursor %d", rogue.Pos, m, cur)
	}
	waitFor(t, "the join above 2^53 dead-lettered", 10*time.Second, func() bool { return r.Stats().DeadLettered == 1 })
}
