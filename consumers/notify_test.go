package consumers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

func TestReceiptNotifierCoalescesAndStaysQuietForLargeGroups(t *testing.T) {
	p := senderAndReaders(t, "r0", "r1", "r2", "r3", "r4")
	ctx := context.Background()
	pushes := senderOnline(t, p)
	// Five readers read everything: one receipts frame for the sender.
	var rs []Record[schema.Receipt]
	var evs []schema.Receipt
	for i := 0; i < 5; i++ {
		ev := schema.Receipt{Gid: "g", Uid: fmt.Sprint("r", i), Upto: 2, At: 1}
		evs = append(evs, ev)
		rs = append(rs, Record[schema.Receipt]{Offset: int64(i), Event: ev})
	}
	run := func(n *ReceiptNotifier) int64 {
		t.Helper()
		if _, err := n.Runner(p.base); err != nil {
			t.Fatal(err)
		}
		if err := n.Handle(ctx, 0, rs); err != nil {
			t.Fatal(err)
		}
		if err := n.flush(ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
		if err := n.flush(ctx, time.Now()); err != nil { // nothing new: nothing sent
			t.Fatal(err)
		}
		return n.Frames()
	}
	// The projection has not applied the reads yet: nothing is computed.
	early := &ReceiptNotifier{Redis: p.redis}
	if got := run(early); got != 0 {
		t.Fatalf("%d frames before the reads were applied", got)
	}
	if err := p.redis.AdvanceReads(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := early.flush(ctx, time.Now().Add(time.Hour)); err != nil || early.Frames() != 1 {
		t.Fatalf("after the reads were applied: %d frames (err %v), want 1", early.Frames(), err)
	}
	select {
	case b := <-pushes:
		want := `{"op":"receipts","gid":"g","counts":[{"msgid":0,"read":5,"audience":5},{"msgid":1,"read":5,"audience":5},{"msgid":2,"read":5,"audience":5}]}`
		if len(b.Items) != 1 || string(b.Items[0].Msg) != want || fmt.Sprint(b.Items[0].Uids) != "[s]" {
			t.Fatalf("pushed %+v", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no receipts frame published")
	}
	if got := run(&ReceiptNotifier{Redis: p.redis, PollOnlyAbove: 3}); got != 0 {
		t.Fatalf("a group over the poll-only size got %d receipt pushes", got)
	}
}

// A group whose counts cannot be computed (here, a corrupt window) does not
// cost the other groups of the same tick their updates: it is tried again,
// and theirs go out.
func TestReceiptNotifierPublishesTheHealthyGroupsWhenOneFails(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	for _, gid := range []string{"ok", "bad"} {
		if err := p.redis.ApplyMembers(ctx, []schema.Member{
			{Gid: gid, Uid: "s", Op: schema.OpJoin, Pos: -1}, {Gid: gid, Uid: "r", Op: schema.OpJoin, Pos: -1}}); err != nil {
			t.Fatal(err)
		}
		if err := p.redis.AppendWindow(ctx, nil, []schema.Message{{Gid: gid, Sender: "s", ClientMsgID: "c-" + gid, SentAt: 1, Body: []byte("x"), MsgID: 0}}); err != nil {
			t.Fatal(err)
		}
		if err := p.redis.AdvanceReads(ctx, []schema.Receipt{{Gid: gid, Uid: "r", Upto: 0, At: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.rc.ZAdd(ctx, "chat:{bad}:win", redis.Z{Score: 0, Member: "not a window member"}).Err(); err != nil {
		t.Fatal(err)
	}
	pushes := senderOnline(t, p)
	// Groups are visited in map order: several rounds, so that the bad
	// group comes first in some.
	for round := range 8 {
		n := &ReceiptNotifier{Redis: p.redis}
		if _, err := n.Runner(p.base); err != nil {
			t.Fatal(err)
		}
		recs := []Record[schema.Receipt]{
			{Offset: 0, Event: schema.Receipt{Gid: "bad", Uid: "r", Upto: 0, At: 1}},
			{Offset: 1, Event: schema.Receipt{Gid: "ok", Uid: "r", Upto: 0, At: 1}},
		}
		if err := n.Handle(ctx, 0, recs); err != nil {
			t.Fatal(err)
		}
		if err := n.flush(ctx, time.Now()); err == nil || !strings.Contains(err.Error(), "bad") {
			t.Fatalf("round %d: flush: %v, want the bad group's error", round, err)
		}
		select {
		case b := <-pushes:
			if len(b.Items) != 1 || !strings.Contains(string(b.Items[0].Msg), `"gid":"ok"`) {
				t.Fatalf("round %d: pushed %+v, want the ok group's counts", round, b)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the ok group's update was lost with the bad group's error", round)
		}
		n.mu.Lock()
		_, retried := n.dirty["bad"]
		n.mu.Unlock()
		if !retried {
			t.Fatalf("round %d: the bad group is not tried again", round)
		}
	}
}

// The read cursors the notifier remembers go with a quiet group, so its
// memory follows the groups being read now, not every group ever read.
func TestReceiptNotifierForgetsQuietGroups(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	n := &ReceiptNotifier{Redis: p.redis, Interval: time.Second}
	if _, err := n.Runner(p.base); err != nil {
		t.Fatal(err)
	}
	// Message 3 of q is in the window, and r's read of it applied.
	if err := p.redis.AppendWindow(ctx, nil, []schema.Message{{Gid: "q", Sender: "s", ClientMsgID: "c3", SentAt: 1, Body: []byte("x"), MsgID: 3}}); err != nil {
		t.Fatal(err)
	}
	read := schema.Receipt{Gid: "q", Uid: "r", Upto: 3, At: 1}
	if err := p.redis.AdvanceReads(ctx, []schema.Receipt{read}); err != nil {
		t.Fatal(err)
	}
	if err := n.Handle(ctx, 0, []Record[schema.Receipt]{{Event: read}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := n.flush(ctx, now); err != nil {
		t.Fatal(err)
	}
	if len(n.last) != 1 {
		t.Fatalf("%d groups remembered after a read, want 1", len(n.last))
	}
	if err := n.flush(ctx, now.Add(11*time.Second)); err != nil {
		t.Fatal(err)
	}
	if len(n.last) != 0 {
		t.Fatalf("%d groups remembered after 11 quiet intervals, want 0", len(n.last))
	}
}

// A group whose update waits for the receipt projection (stopped, or far
// behind) is read again with a back-off up to Interval, as often as a busy
// group at most, not at every tick: the reads of such groups would load
// Redis tenfold for as long as the projection lags, and more so the more
// groups wait. Its update still goes out once the projection applies the
// reads.
func TestReceiptNotifierBacksOffAGroupNotReady(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	if err := p.redis.ApplyMembers(ctx, []schema.Member{
		{Gid: "g", Uid: "s", Op: schema.OpJoin, Pos: -1}, {Gid: "g", Uid: "r", Op: schema.OpJoin, Pos: -1}}); err != nil {
		t.Fatal(err)
	}
	if err := p.redis.AppendWindow(ctx, nil, []schema.Message{{Gid: "g", Sender: "s", ClientMsgID: "c", SentAt: 1, Body: []byte("x"), MsgID: 0}}); err != nil {
		t.Fatal(err)
	}
	pushes := senderOnline(t, p)
	n := &ReceiptNotifier{Redis: p.redis, Interval: time.Second}
	if _, err := n.Runner(p.base); err != nil {
		t.Fatal(err)
	}
	read := schema.Receipt{Gid: "g", Uid: "r", Upto: 0, At: 1}
	if err := n.Handle(ctx, 0, []Record[schema.Receipt]{{Event: read}}); err != nil {
		t.Fatal(err)
	}
	if err := p.rc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// 10 s of ticks (Interval/10) while the projection has not applied the read.
	now := time.Now()
	for range 100 {
		now = now.Add(n.Interval / 10)
		if err := n.flush(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	if reads := hgetallCalls(t, p); reads > 15 {
		t.Fatalf("the group was read %d times in 10 s of waiting for the projection, want at most about once per second", reads)
	}
	if err := p.redis.AdvanceReads(ctx, []schema.Receipt{read}); err != nil {
		t.Fatal(err)
	}
	if err := n.flush(ctx, now.Add(n.Interval)); err != nil || n.Frames() != 1 {
		t.Fatalf("once the read was applied: %d frames (err %v), want 1", n.Frames(), err)
	}
	select {
	case <-pushes:
	case <-time.After(5 * time.Second):
		t.Fatal("no receipts frame published")
	}
}

// hgetallCalls is how many HGETALL commands Redis ran since its stats were
// reset: ReadState runs one per group it reads.
func hgetallCalls(t *testing.T, p *pipeline) int {
	t.Helper()
	info, err := p.rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hgetall:calls="); ok {
			var calls int
			fmt.Sscanf(rest, "%d", &calls)
			return calls
		}
	}
	return 0
}

// senderOnline puts the sender s online on node n1 and returns n1's pushes.
func senderOnline(t *testing.T, p *pipeline) <-chan store.PushBatch {
	t.Helper()
	ctx := context.Background()
	if err := p.redis.SetOnline(ctx, "n1", []string{"s"}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	pushes, err := p.redis.SubscribePushes(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	return pushes
}

// A receipt whose upto is above 2^53, written straight into chat.receipts
// (the gateway refuses it as beyond the head), would be rounded down in
// Redis's sorted set: the notifier would wait for ever for the projection
// to reach it, and with it every later receipt of its group. Both
// consumers dead-letter it instead, and the group's next receipts go out.
func TestReceiptAboveTwoToThe53IsDeadLetteredAndTheGroupsReceiptsFlow(t *testing.T) {
	p := senderAndReaders(t, "r1", "r2")
	ctx := context.Background()
	pushes := senderOnline(t, p)
	proj, err := (&ReceiptProjector{Redis: p.redis}).Runner(p.base)
	if err != nil {
		t.Fatal(err)
	}
	start(t, proj.Run)
	n := &ReceiptNotifier{Redis: p.redis, Interval: 100 * time.Millisecond}
	notes, err := n.Runner(p.base)
	if err != nil {
		t.Fatal(err)
	}
	start(t, notes.Run)
	start(t, n.Run)
	waitFor(t, "the notifier at the end of chat.receipts", 20*time.Second, notes.CaughtUp)

	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(p.broker.Addr()), Topic: topics.Receipts, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	rogue := schema.Receipt{Gid: "g", Uid: "r1", Upto: schema.MaxCursor + 1, At: 1}
	if err := w.WriteMessages(ctx, kafka.Message{Key: schema.MemberKey("g", "r1"), Value: schema.AppendReceipt(nil, &rogue)}); err != nil {
		t.Fatal(err)
	}
	if err := p.prod.SendReceipts(ctx, schema.Receipt{Gid: "g", Uid: "r2", Upto: 2, At: 1}); err != nil {
		t.Fatal(err)
	}
	want := `{"op":"receipts","gid":"g","counts":[{"msgid":0,"read":1,"audience":2},{"msgid":1,"read":1,"audience":2},{"msgid":2,"read":1,"audience":2}]}`
	select {
	case b := <-pushes:
		if len(b.Items) != 1 || string(b.Items[0].Msg) != want {
			t.Fatalf("pushed %+v, want %s", b, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no receipts frame for the group after a receipt above 2^53: its updates wait for ever")
	}
	waitFor(t, "the record dead-lettered by both consumers", 10*time.Second, func() bool {
		return proj.Stats().DeadLettered == 1 && notes.Stats().DeadLettered == 1
	})
	if reads, err := p.redis.ReadCursors(ctx, "g"); err != nil || reads["r1"] != -1 || reads["r2"] != 2 {
		t.Fatalf("read cursors %v (err %v), want r1 at -1 (the join) and r2 at 2", reads, err)
	}
}

// senderAndReaders is a one-partition pipeline whose group g has sender s
// and the readers, and s's messages 0, 1 and 2 in its window.
func senderAndReaders(t *testing.T, readers ...string) *pipeline {
	t.Helper()
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	members := []schema.Member{{Gid: "g", Uid: "s", Op: schema.OpJoin, Pos: -1}}
	for _, uid := range readers {
		members = append(members, schema.Member{Gid: "g", Uid: uid, Op: schema.OpJoin, Pos: -1})
	}
	if err := p.redis.ApplyMembers(ctx, members); err != nil {
		t.Fatal(err)
	}
	var msgs []schema.Message
	for i := int64(0); i < 3; i++ {
		msgs = append(msgs, schema.Message{Gid: "g", Sender: "s", ClientMsgID: fmt.Sprint("c", i), SentAt: 1, Body: []byte("x"), MsgID: i})
	}
	if err := p.redis.AppendWindow(ctx, nil, msgs); err != nil {
		t.Fatal(err)
	}
	return p
}

// A member reads a message the fan-out pushed before the persister added
// it to the window (the fan-out runs ahead of it). The read's count must
// still reach the sender once the message is in the window, not be
// rendered from the window without it and forgotten.
func TestReceiptNotifierWaitsForTheMessageReadToBePersisted(t *testing.T) {
	p := senderAndReaders(t, "r")
	ctx := context.Background()
	pushes := senderOnline(t, p)
	n := &ReceiptNotifier{Redis: p.redis, Interval: time.Second}
	if _, err := n.Runner(p.base); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	read := func(upto, offset int64) {
		ev := schema.Receipt{Gid: "g", Uid: "r", Upto: upto, At: 1}
		if err := p.redis.AdvanceReads(ctx, []schema.Receipt{ev}); err != nil {
			t.Fatal(err)
		}
		if err := n.Handle(ctx, 0, []Record[schema.Receipt]{{Offset: offset, Event: ev}}); err != nil {
			t.Fatal(err)
		}
	}
	flush := func(times int) {
		for range times {
			now = now.Add(2 * time.Second)
			if err := n.flush(ctx, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	read(2, 0)
	flush(1)
	<-pushes
	read(3, 1) // 3 is in the log and was pushed to r; the persister has yet to add it
	flush(3)
	if err := p.redis.AppendWindow(ctx, nil, []schema.Message{{Gid: "g", Sender: "s", ClientMsgID: "c3", SentAt: 1, Body: []byte("x"), MsgID: 3}}); err != nil {
		t.Fatal(err)
	}
	flush(3)
	select {
	case b := <-pushes:
		if got := string(b.Items[0].Msg); !strings.Contains(got, `{"msgid":3,"read":1,"audience":1}`) {
			t.Fatalf("the sender was pushed %s, want message 3 read by 1", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the sender was never told that message 3 was read")
	}
}

// A group's former members are no audience of what is sent after they
// left: a group of a sender and two readers that once had many more
// members still gets its receipts pushed.
func TestReceiptNotifierCountsOnlyTheAudienceForPollOnly(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	var members []schema.Member
	for i := range 5 {
		uid := fmt.Sprint("former", i)
		members = append(members, schema.Member{Gid: "g", Uid: uid, Op: schema.OpJoin, Pos: -1},
			schema.Member{Gid: "g", Uid: uid, Op: schema.OpLeave, Pos: 0, HasJoined: true, Joined: -1})
	}
	for _, uid := range []string{"s", "r0", "r1"} {
		members = append(members, schema.Member{Gid: "g", Uid: uid, Op: schema.OpJoin, Pos: 0})
	}
	if err := p.redis.ApplyMembers(ctx, members); err != nil {
		t.Fatal(err)
	}
	msgs := []schema.Message{{Gid: "g", Sender: "s", ClientMsgID: "c1", SentAt: 1, Body: []byte("x"), MsgID: 1}}
	if err := p.redis.AppendWindow(ctx, nil, msgs); err != nil {
		t.Fatal(err)
	}
	reads := []schema.Receipt{{Gid: "g", Uid: "r0", Upto: 1, At: 1}}
	if err := p.redis.AdvanceReads(ctx, reads); err != nil {
		t.Fatal(err)
	}
	pushes := senderOnline(t, p)
	n := &ReceiptNotifier{Redis: p.redis, PollOnlyAbove: 3}
	if _, err := n.Runner(p.base); err != nil {
		t.Fatal(err)
	}
	if err := n.Handle(ctx, 0, []Record[schema.Receipt]{{Offset: 0, Event: reads[0]}}); err != nil {
		t.Fatal(err)
	}
	if err := n.flush(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-pushes:
		want := `{"op":"receipts","gid":"g","counts":[{"msgid":1,"read":1,"audience":2}]}`
		if len(b.Items) != 1 || string(b.Items[0].Msg) != want {
			t.Fatalf("pushed %+v; want %s", b, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no receipts frame for a group of 3 with 5 former members, under a poll-only size of 3")
	}
}
