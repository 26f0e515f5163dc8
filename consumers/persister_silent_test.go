package consumers

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/history"
)

// A group whose every message retention removed from the topic shows up
// nowhere in a replay after Redis lost its data. ClickHouse still holds
// its history: an offline member who logs in after the rebuild must get
// the messages after their cursor, not a group that seems to have none.
func TestPersisterRebuildingAfterRetentionKeepsASilentGroupsHistory(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	s := sent{}
	p.sendTo(t, []string{"old"}, 5, s) // old: msgids 0..4, then silent
	p.sendTo(t, []string{"new"}, 5, s) // new: msgids 5..9
	_, stop := p.persister(t, nil)
	p.waitPersisted(t, s, 30*time.Second)
	stop()

	p.retainAndWipe(t, s["new"][0]) // every record of "old" is gone from the topic
	p.persister(t, nil)
	p.waitPersisted(t, sent{"new": s["new"]}, 30*time.Second)

	h, _ := history.New(history.Config{Redis: p.redis, ClickHouse: p.ch})
	ids := s["old"]
	page, err := h.Pull(ctx, "old", ids[2], 100)
	if err != nil {
		t.Fatalf("pull of old after %d: %v", ids[2], err)
	}
	var got []int64
	for _, m := range page.Messages {
		got = append(got, m.MsgID)
	}
	if !slices.Equal(got, ids[3:]) || page.Head != ids[4] {
		t.Fatalf("pull of old after %d returned %v with head %d, want %v with head %d: ClickHouse holds them",
			ids[2], got, page.Head, ids[3:], ids[4])
	}
	if head, err := p.redis.Head(ctx, "old"); err != nil || head != ids[4] {
		t.Fatalf("Head(old) = %d, %v; want %d (acks up to it are refused otherwise)", head, err, ids[4])
	}
}
