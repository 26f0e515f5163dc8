package consumers

import (
	"context"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

// slowSaves is memAcks whose AdvanceOffset answers late: Redis has saved
// the position, the reply is still on its way (a loaded machine, a slow
// network).
type slowSaves struct {
	*memAcks
	delay time.Duration
}

func (s *slowSaves) AdvanceOffset(ctx context.Context, consumer, topic string, part int, from, to int64) (bool, error) {
	ok, err := s.memAcks.AdvanceOffset(ctx, consumer, topic, part, from, to)
	time.Sleep(s.delay)
	return ok, err
}

// The state check must not take the runner's own save, seen in the store
// before its reply came back, for a position that moved under it: that
// restarted the partition with a warning that the state was wiped.
func TestTheStateCheckDoesNotTakeTheRunnersOwnSaveForAWipe(t *testing.T) {
	k := newKafka(t, 1)
	h := newMemAcks()
	store := &slowSaves{memAcks: h, delay: 60 * time.Millisecond}
	r, _ := runAcksWith(t, k, "acks-slow-saves", h, store, func(c *Config[schema.Ack]) {
		c.CommitInterval = 5 * time.Millisecond
		c.StateCheck = 100 * time.Millisecond
	})
	waitFor(t, "assignment", 10*time.Second, r.CaughtUp)
	for range 60 { // 3 s of records: commits one after the other
		sendAcks(t, k, 5)
		time.Sleep(50 * time.Millisecond)
	}
	waitFor(t, "every ack handled", 10*time.Second, func() bool { return h.handled() == 300 })
	if n := r.Stats().Replays; n != 0 {
		t.Fatalf("%d partition replays while nothing was wiped: the state check took the runner's own saves for a wipe", n)
	}
}
