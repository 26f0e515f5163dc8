package consumers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

func TestReceiptNotifierCoalescesAndStaysQuietForLargeGroups(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	members := []schema.Member{{Gid: "g", Uid: "s", Op: schema.OpJoin, Pos: -1}}
	for i := 0; i < 5; i++ {
		members = append(members, schema.Member{Gid: "g", Uid: fmt.Sprint("r", i), Op: schema.OpJoin, Pos: -1})
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
	if err := p.redis.SetOnline(ctx, "n1", []string{"s"}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	pushes, err := p.redis.SubscribePushes(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
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
