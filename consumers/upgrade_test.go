package consumers

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// The "<topic>/<part>/handled" field of chat:offsets:<consumer> was a
// plain position ("3") before it kept the records a reset forward
// skipped ("<end>:<skipFrom>:<skipTo>"). A projector reset by a chatctl
// of before, then upgraded (stop, reset, upgrade, start), read the old
// value as "nothing handled" and its replay appended corrections again:
// receipts dated the replay's day, which receipt_events counts. Same
// steps as TestAReplayAfterAResetAppendsNoCorrections, with the field as
// the older chatctl wrote it.
func TestAReplayAfterAResetByAnOlderChatctlAppendsNoCorrections(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	base := p.base
	tune := base.Tune
	base.Tune = func(r *RunnerTuning) { tune(r); r.BatchSize = 1 }
	for _, upto := range []int64{10, 20, 30} {
		if err := p.prod.SendReceipts(ctx, schema.Receipt{Gid: "g1", Uid: "u1", Upto: upto, At: 1}); err != nil {
			t.Fatal(err)
		}
	}
	run := func() (stop func()) {
		rr, err := (&ReceiptProjector{Redis: p.redis}).Runner(base)
		if err != nil {
			t.Fatal(err)
		}
		return start(t, rr.Run)
	}
	saved := func() int64 {
		off, err := p.redis.Offsets(ctx, GroupReceiptProjector, topics.Receipts)
		if err != nil {
			t.Fatal(err)
		}
		return off[0]
	}
	stop := run()
	waitFor(t, "the three receipts handled", 20*time.Second, func() bool { return saved() == 3 })
	stop()
	// chatctl consumer-groups reset chat.receipt-projector -to earliest, by
	// an older chatctl: the position, origin "next", and handled = the
	// position it had before, as a plain number.
	key := "chat:offsets:" + GroupReceiptProjector
	field := topics.Receipts + "/0"
	if err := p.rc.HSet(ctx, key, field, kafka.FirstOffset, field+"/origin", "next", field+"/handled", "3").Err(); err != nil {
		t.Fatal(err)
	}
	stop = run() // this release's projector
	defer func() { stop() }()
	waitFor(t, "the replay at the log's end", 20*time.Second, func() bool { return saved() >= 3 })
	time.Sleep(500 * time.Millisecond)
	if end := p.topicEnd(t, topics.Receipts); end != 3 {
		t.Fatalf("after a replay (reset by the previous chatctl) of u1's 3 receipts over the cursors they built, chat.receipts holds %d records; want 3 (no corrections, as after a reset by this chatctl)", end)
	}
}
