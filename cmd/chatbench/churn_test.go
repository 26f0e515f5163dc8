package main

import (
	"context"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// Churn (or the end of the run) closes a client while its delivery
// goroutine is handing a message over: with -read, OnMessage then marks it
// read on a client whose Close has begun. That is chatbench's own doing,
// not an error of the server, and must not be counted as one.
func TestMarkingReadOnAClosingClientIsNoError(t *testing.T) {
	cfg := &Config{Groups: 1, GroupSize: 2, Read: 1, Quiet: true}
	withConnectedBench(t, cfg, func(ctx context.Context, b *bench, p *plan) error {
		sender, reader := b.members[0], b.members[1]
		msgid, err := sender.client().Send(ctx, p.gids[0], b.body(time.Now(), 0))
		if err != nil {
			return err
		}
		// The reader's client is taken by churn and closed while OnMessage
		// hands it the message.
		c := reader.take()
		_ = c.Close()
		b.onMessage(reader, 1, time.Now(), c, protocol.Message{Gid: p.gids[0], MsgID: msgid, Sender: p.uids[sender.user], Body: b.body(time.Now(), 0)})
		if errs := b.rec.errors(); len(errs) != 0 {
			t.Errorf("marking read on a client churn was closing counted as errors: %v", errs)
		}
		return nil
	})
}
