package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
)

// The receipt storm of a 200-member group with 20% online: per delivered
// message, how many pushes, ack records reaching Kafka and receipt pushes
// to the sender, with batching off and with the defaults (ack every 10
// messages or 1 s, receipt updates coalesced per second). Readers mark
// every message read as it is delivered, as a client showing it would.
func TestReceiptStormPerDeliveredMessage(t *testing.T) {
	for _, c := range []struct {
		name     string
		ackEvery int
		interval time.Duration
		notify   time.Duration
	}{
		{"batching off", 1, 10 * time.Millisecond, time.Millisecond},
		{"defaults", 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{notifyInterval: c.notify})
			var uids []string
			for i := 0; i < 200; i++ {
				uids = append(uids, fmt.Sprintf("u%03d", i))
			}
			e.group("big", uids...)
			online := uids[:40]
			var ms []*member
			for _, u := range online {
				var m *member
				m = e.connect(0, u, func(cfg *client.Config) {
					cfg.AckEvery, cfg.AckInterval = c.ackEvery, c.interval
					inner := cfg.OnMessage
					cfg.OnMessage = func(msg protocol.Message) {
						inner(msg)
						go m.c.MarkRead(context.Background(), msg.Gid, msg.MsgID)
					}
				})
				ms = append(ms, m)
			}
			time.Sleep(200 * time.Millisecond)
			acks0, pushes0 := e.topicEndsOf(topics.Acks), e.gws[0].g.Stats().Pushes
			const n = 100
			sender := ms[0]
			for i := 0; i < n; i++ {
				if _, err := sender.c.Send(context.Background(), "big", fmt.Sprint("message ", i)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond) // 200 messages/s into the group
			}
			for _, m := range ms {
				waitFor(t, m.uid+" has all", 30*time.Second, func() bool { return len(m.delivered("big")) == n })
			}
			time.Sleep(2500 * time.Millisecond) // the last batched acks, reads and receipt updates
			delivered := float64(n * len(online))
			acks := float64(e.topicEndsOf(topics.Acks) - acks0)
			pushes := float64(e.gws[0].g.Stats().Pushes - pushes0)
			receipts := float64(e.notifier.Frames())
			t.Logf("%s: %d messages, %.0f deliveries: pushes/delivery %.3f, ack records/delivery %.3f, receipt pushes/delivery %.4f",
				c.name, n, delivered, pushes/delivered, acks/delivered, receipts/delivered)
			if c.name == "defaults" {
				if acks/delivered > 0.1 || receipts/delivered > 0.05 {
					t.Fatalf("with the defaults: %.3f ack records and %.4f receipt pushes per delivered message; goals <= 0.1 and <= 0.05",
						acks/delivered, receipts/delivered)
				}
			}
		})
	}
}
