package consumers

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// An operator resets a running persister by hand (-force) just after it
// claimed a partition's start, before its first batch is in. The batch in
// hand must not leave its own origin over the reset's: the persister that
// goes on from the reset position must take that position as the origin.
func TestAResetByHandIsNotOverwrittenByTheOriginOfTheRunItEnds(t *testing.T) {
	srv := testserver.NewRedis(t)
	rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { rc.Close() })
	rds, err := store.NewRedis(rc, store.RedisConfig{WindowSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ok, err := rds.AdvanceOffset(ctx, GroupPersister, topics.Messages, 0, -1, kafka.FirstOffset); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	now := time.Now().UnixMilli()
	batch := func(from int64) []Record[schema.Message] {
		var recs []Record[schema.Message]
		for o := from; o < from+3; o++ {
			recs = append(recs, Record[schema.Message]{Offset: o, Event: schema.Message{Gid: "g0", Sender: "u1", ClientMsgID: "c", SentAt: now, Body: []byte("x")}})
		}
		return recs
	}
	old := &Persister{Redis: rds, fenced: true}
	old.Start(0, kafka.FirstOffset)
	// chatctl consumer-groups reset chat.persister -to 100 -force
	if err := rds.SaveOffsets(ctx, GroupPersister, topics.Messages, map[int]int64{0: 100}); err != nil {
		t.Fatal(err)
	}
	_ = old.Handle(ctx, 0, batch(0)) // the batch in hand as the reset lands

	// The runner notices the moved position and goes on from it.
	next := &Persister{Redis: rds, fenced: true}
	next.Start(0, 100)
	recs := batch(100)
	msgs := make([]schema.Message, len(recs))
	for i := range recs {
		msgs[i] = recs[i].Event
		msgs[i].MsgID = recs[i].Offset
	}
	o, err := next.origin(ctx, 0, &store.Fence{Consumer: GroupPersister, Topic: topics.Messages, Partition: 0}, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if o == nil || o.Offset != 100 {
		t.Fatalf("origin after the reset to 100: %+v, want offset 100 (with origin 0 the persister skips olderFloors and claimOriginals)", o)
	}
}
