package consumers

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// A chat.messages record whose key names another group than its value (a
// producer outside chatd) lies in the key's partition: its offset is a
// msgid of that partition's numbering, not of the value's group. Stored, it
// made gb's head jump past msgids gb had not reached. It is poison: sent to
// the dead-letter topic, not stored.
func TestARecordKeyedForAnotherGroupIsPoison(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 2, window: 1000})
	ctx := context.Background()
	ga, gb := "ga", "gb"
	for i := 0; topics.Partition(ga, 2) == topics.Partition(gb, 2); i++ {
		gb = "gb" + string(rune('a'+i))
	}
	s := sent{}
	p.sendTo(t, []string{ga}, 5, s) // msgids 0..4 of ga's partition
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(p.broker.Addr()), Topic: topics.Messages,
		Balancer: topics.Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	bad := schema.Message{Gid: gb, Sender: "mallory", SentAt: time.Now().UnixMilli(), Body: []byte("in ga's partition")}
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(ga), Value: schema.AppendMessage(nil, &bad)}); err != nil {
		t.Fatal(err)
	}
	p.sendTo(t, []string{gb}, 1, s) // gb's own first message: msgid 0 of its partition
	r, _ := p.persister(t, nil)
	p.waitPersisted(t, sent{ga: s[ga]}, 30*time.Second)
	waitFor(t, "a head of gb", 30*time.Second, func() bool {
		head, err := p.redis.Head(ctx, gb)
		return err == nil && head >= 0
	})
	if head, err := p.redis.Head(ctx, gb); err != nil || head != s[gb][0] {
		t.Errorf("gb's head is %d (%v); want %d, its only message: a record keyed %q became a message of gb", head, err, s[gb][0], ga)
	}
	if got := r.Stats().DeadLettered; got != 1 {
		t.Errorf("%d records dead-lettered; want 1, the one keyed for another group", got)
	}
}
