package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// A chat.acks record keyed for another member is poison for the live ack
// projector (dead-lettered); `chatctl rebuild acks` applied it, and the
// rebuilt projection differed from the live one with a report saying OK.
func TestRebuildSkipsARecordTheLiveProjectorDeadLetters(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g1", Uid: "u1", Upto: 5, At: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(e.brokers...), Topic: topics.Acks,
		Balancer: topics.Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	rogue := schema.Ack{Gid: "g1", Uid: "u1", Upto: 50, At: time.Now().UnixMilli()}
	if err := w.WriteMessages(ctx, kafka.Message{Key: schema.MemberKey("g1", "u2"), Value: schema.AppendAck(nil, &rogue)}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r, err := (&consumers.AckProjector{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	stop := e.start(r)
	e.waitFor("the live projector caught up", func() bool { return r.CaughtUp() && r.Stats().DeadLettered == 1 })
	live, _, _ := e.rds.AckCursor(ctx, "g1", "u1")
	stop()
	e.waitGroupEmpty(consumers.GroupAckProjector)
	out := e.mustCtl("rebuild", "acks")
	rebuilt, _, _ := e.rds.AckCursor(ctx, "g1", "u1")
	if live != rebuilt {
		t.Fatalf("u1's ack cursor is %d live (the record keyed g1/u2 dead-lettered) but %d after `chatctl rebuild acks`; the rebuild said:\n%s",
			live, rebuilt, strings.TrimSpace(out))
	}
}

// A chat.messages record keyed for another group is poison for the
// persister (TestARecordOfAnotherGroupsPartitionIsPoison); `chatctl backfill`
// stored it as a message of the group its value names, with a msgid of
// another partition's numbering, where "a backfill never changes a query
// result".
func TestBackfillSkipsAMessageThePersisterDeadLetters(t *testing.T) {
	e := newEnv(t, 2)
	ch := e.withClickHouse("rev")
	ctx := context.Background()
	ga, gb := "ga", "gb"
	for i := 0; topics.Partition(ga, 2) == topics.Partition(gb, 2); i++ {
		gb = "gb" + string(rune('a'+i))
	}
	e.sendMessages(schema.Message{Gid: ga, Sender: "u1", ClientMsgID: "c1", SentAt: time.Now().UnixMilli(), Body: []byte("x")},
		schema.Message{Gid: ga, Sender: "u1", ClientMsgID: "c2", SentAt: time.Now().UnixMilli(), Body: []byte("x")})
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(e.brokers...), Topic: topics.Messages,
		Balancer: topics.Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	bad := schema.Message{Gid: gb, Sender: "mallory", SentAt: time.Now().UnixMilli(), Body: []byte("in ga's partition")}
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(ga), Value: schema.AppendMessage(nil, &bad)}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p, err := (&consumers.Persister{Redis: e.rds, ClickHouse: ch}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	e.start(p)
	e.waitFor("the persister caught up", func() bool { return p.CaughtUp() && p.Stats().DeadLettered == 1 })
	live := chQueries(t, ch, []string{ga, gb})
	out := e.mustCtl("backfill", "-tables", "messages")
	after := chQueries(t, ch, []string{ga, gb})
	if d := diff(live, after); len(d) > 0 {
		t.Fatalf("a backfill over the live persister's rows changed query results (it stored the record keyed %q as a message of %s):\n%s\nbackfill said:\n%s",
			ga, gb, strings.Join(d, "\n"), strings.TrimSpace(out))
	}
}
