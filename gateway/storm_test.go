package gateway

import (
	"context"
	"fmt"
	"sync"
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
			var countsMu sync.Mutex
			counts := map[int64]int{} // the most readers a receipts frame gave each message
			for _, u := range online {
				var m *member
				m = e.connect(0, u, func(cfg *client.Config) {
					cfg.AckEvery, cfg.AckInterval = c.ackEvery, c.interval
					if u == online[0] {
						cfg.OnReceipts = func(r protocol.Receipts) {
							countsMu.Lock()
							defer countsMu.Unlock()
							for _, rc := range r.Counts {
								counts[rc.MsgID] = max(counts[rc.MsgID], rc.Read)
							}
						}
					}
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
			var last int64
			for i := 0; i < n; i++ {
				id, err := sender.c.Send(context.Background(), "big", fmt.Sprint("message ", i))
				if err != nil {
					t.Fatal(err)
				}
				last = id
				time.Sleep(5 * time.Millisecond) // 200 messages/s into the group
			}
			for _, m := range ms {
				waitFor(t, m.uid+" has all", 30*time.Second, func() bool { return len(m.delivered("big")) == n })
			}
			// Every member's last ack and read are in once the projections
			// hold their cursors at the last message: nothing is left to
			// ack or read, so no record comes after.
			ctx := context.Background()
			waitFor(t, "every ack cursor at the last message", 30*time.Second, func() bool {
				acks, err := e.redis.AckCursors(ctx, "big")
				return err == nil && allAt(acks, online, last)
			})
			waitFor(t, "every read cursor at the last message", 30*time.Second, func() bool {
				st, err := e.redis.ReadState(ctx, "big")
				return err == nil && allAt(st.Reads, online, last)
			})
			// The sender is pushed the last message's count once the
			// notifier has seen every read of it. A receipt it handled
			// later still goes out within its interval of that push: the
			// notifier sends nothing to mark it has none left, so the end
			// of that interval, not an event, bounds its last frame.
			waitFor(t, "the sender told every online member read the last message", 30*time.Second, func() bool {
				countsMu.Lock()
				defer countsMu.Unlock()
				return counts[last] == len(online)-1
			})
			time.Sleep(e.notifier.Interval + e.notifier.Interval/10)
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

// allAt reports whether the cursor of every uid has reached msgid.
func allAt(cursors map[string]int64, uids []string, msgid int64) bool {
	for _, u := range uids {
		if cursors[u] < msgid {
			return false
		}
	}
	return true
}
