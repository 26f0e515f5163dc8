package consumers

import (
	"context"
	"testing"
	"time"

	"github.com/groupchat/chatd/topics"
)

// When Redis is lost after retention has moved chat.messages' start, the
// persister rebuilds the window from what the topic still holds: a group
// silent since before the log's start has no window and no floor until its
// next message is persisted. The fan-out must not take that for a group
// that never had a message: prev -1 on its next message tells a member
// whose cursor is below the group's last stored message (one who joined
// before it and never got it) that nothing came before, and they ack past
// it.
func TestPersistedPrevsAfterARebuildPastRetentionIsNotNothingBefore(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	s := sent{}
	p.sendTo(t, []string{"quiet"}, 3, s) // msgids 0..2, all before the log's start to be
	p.sendTo(t, []string{"busy"}, 5, s)  // 3..7
	_, stop := p.persister(t, nil)
	p.waitPersisted(t, s, 30*time.Second)
	stop()

	busy := s["busy"]
	p.retainAndWipe(t, busy[0]) // retention removes every message of "quiet"; Redis restarts empty
	_, stop = p.persister(t, nil)
	p.waitPersisted(t, sent{"busy": busy}, 30*time.Second)
	stop()
	if n, _ := p.ch.CountMessages(ctx, "quiet"); n != 3 {
		t.Fatalf("ClickHouse holds %d messages of quiet, want 3", n)
	}

	// The next message of "quiet" is the next record; the persister has
	// stored every record before it.
	next := busy[len(busy)-1] + 1
	prevs, err := p.redis.PersistedPrevs(ctx, GroupPersister, topics.Messages, 0, next, map[string]int64{"quiet": next})
	if err != nil {
		t.Fatal(err)
	}
	if prev, ok := prevs["quiet"]; ok && prev != s["quiet"][2] {
		t.Fatalf("prev of quiet's next message %d is %d, want %d (in ClickHouse) or unknown", next, prev, s["quiet"][2])
	}
}
