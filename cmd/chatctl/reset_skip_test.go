package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// A reset that moves the persister or a projector past records it has not
// read leaves them out of its stores for good: it is refused, saying
// where and how many, unless -skip-unread. A move back (a replay) is not.
// Before, the reset compared nothing and skipped them silently.
func TestResetPastUnreadRecordsIsRefused(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	acks := func(from, to int) {
		for i := from; i < to; i++ {
			if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: fmt.Sprint("u", i), Upto: 1, At: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	acks(0, 5)
	r, err := (&consumers.AckProjector{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	stop := e.start(r)
	saved := func() int64 {
		o, err := e.rds.Offsets(ctx, consumers.GroupAckProjector, topics.Acks)
		if err != nil {
			t.Fatal(err)
		}
		return o[0]
	}
	e.waitFor("the ack projector to save position 5", func() bool { return saved() == 5 })
	stop()
	e.waitGroupEmpty(consumers.GroupAckProjector)
	acks(5, 10) // unread

	for _, to := range []string{"latest", "8"} {
		_, err := e.ctl("consumer-groups", "reset", consumers.GroupAckProjector, "-to", to)
		if !errors.Is(err, ErrSkipsUnread) || !strings.Contains(err.Error(), "partition 0 from 5 to") || !strings.Contains(err.Error(), "-skip-unread") {
			t.Fatalf("reset of the ack projector at 5 to %s: %v, want a refusal naming partition 0 from 5 and -skip-unread", to, err)
		}
		if o := saved(); o != 5 {
			t.Fatalf("the refused reset to %s moved the saved position to %d", to, o)
		}
	}
	out := e.mustCtl("consumer-groups", "reset", consumers.GroupAckProjector, "-to", "latest", "-dry-run")
	if !strings.Contains(out, "forward: skips 5 unread") || !strings.Contains(out, "would be refused") {
		t.Fatalf("the plan of a reset past 5 unread records:\n%s\nwant the move marked and the refusal announced", out)
	}
	out = e.mustCtl("consumer-groups", "reset", consumers.GroupAckProjector, "-to", "2")
	if !strings.Contains(out, "back: replays 3") || saved() != 2 {
		t.Fatalf("reset back to 2: saved %d\n%s\nwant 2, marked as a replay", saved(), out)
	}
	e.mustCtl("consumer-groups", "reset", consumers.GroupAckProjector, "-to", "latest", "-skip-unread")
	if o := saved(); o != 10 {
		t.Fatalf("reset to latest with -skip-unread: saved %d, want 10", o)
	}

	// A persister that has read nothing goes on from the log start: a
	// reset to a time skips what came before it.
	now := time.Now()
	for i := range 4 {
		e.sendMessages(schema.Message{Gid: "g", Sender: "u", SentAt: now.Add(time.Duration(i-4) * time.Hour).UnixMilli(), Body: []byte("b")})
	}
	to := now.Add(-150 * time.Minute).UTC().Format(time.RFC3339)
	_, err = e.ctl("consumer-groups", "reset", consumers.GroupPersister, "-to", to)
	if !errors.Is(err, ErrSkipsUnread) || !strings.Contains(err.Error(), "partition 0 from 0 to 2 (2)") || !strings.Contains(err.Error(), "ClickHouse") {
		t.Fatalf("reset of a persister that read nothing to %s: %v, want a refusal naming partition 0 from 0 to 2", to, err)
	}
	// The fan-out's effect is transient: it may skip.
	e.mustCtl("consumer-groups", "reset", consumers.GroupFanout, "-to", "earliest")
	if out := e.mustCtl("consumer-groups", "reset", consumers.GroupFanout, "-to", "latest"); !strings.Contains(out, "forward: skips 4 unread") {
		t.Fatalf("reset of the fan-out to latest:\n%s\nwant the move marked", out)
	}
}
