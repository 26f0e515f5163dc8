package consumers

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// fixedPartition is a kafka.Balancer that writes every record to one
// partition, as a client with another partitioner (librdkafka's default,
// CRC32) may place a key.
type fixedPartition int

func (f fixedPartition) Balance(kafka.Message, ...int) int { return int(f) }

// A chat.messages record for gb that lies in ga's partition (a producer
// outside chatd) takes a msgid of ga's numbering: stored, it made gb's
// head jump past msgids gb had not reached. Whether its key names ga (a
// key not its event's) or gb (a tool with another partitioner: kcat's
// default is not murmur2 of the gid, and the partition was not checked
// before), it is poison: sent to the dead-letter topic, not stored.
func TestARecordOfAnotherGroupsPartitionIsPoison(t *testing.T) {
	for _, keyedFor := range []string{"ga", "gb"} {
		t.Run("keyed for "+keyedFor, func(t *testing.T) {
			p := newPipeline(t, pipelineOpts{partitions: 2, window: 1000})
			ctx := context.Background()
			ga, gb := "ga", "gb"
			for i := 0; topics.Partition(ga, 2) == topics.Partition(gb, 2); i++ {
				gb = "gb" + string(rune('a'+i))
			}
			key := ga
			if keyedFor == "gb" {
				key = gb
			}
			s := sent{}
			p.sendTo(t, []string{ga}, 5, s) // msgids 0..4 of ga's partition
			w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(p.broker.Addr()), Topic: topics.Messages,
				Balancer: fixedPartition(topics.Partition(ga, 2)), BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
			defer w.Close()
			bad := schema.Message{Gid: gb, Sender: "mallory", SentAt: time.Now().UnixMilli(), Body: []byte("in ga's partition")}
			if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(key), Value: schema.AppendMessage(nil, &bad)}); err != nil {
				t.Fatal(err)
			}
			p.sendTo(t, []string{gb}, 1, s) // gb's own first message: msgid 0 of its partition
			r, _ := p.persister(t, nil)
			p.waitPersisted(t, sent{ga: s[ga]}, 30*time.Second)
			waitFor(t, "a head of gb", 30*time.Second, func() bool {
				head, err := p.redis.Head(ctx, gb)
				return err == nil && head >= 0
			})
			time.Sleep(time.Second)
			if head, err := p.redis.Head(ctx, gb); err != nil || head != s[gb][0] {
				t.Errorf("gb's head is %d (%v); want %d, its only message in its partition: a record of gb keyed %q in partition %d (gb's is %d) became a message of gb with a msgid of another partition",
					head, err, s[gb][0], key, topics.Partition(ga, 2), topics.Partition(gb, 2))
			}
			if got := r.Stats().DeadLettered; got != 1 {
				t.Errorf("%d records dead-lettered; want 1, the one in another group's partition", got)
			}
		})
	}
}

// A chat.members record keyed for another member (a producer outside
// chatd) is poison for the member projector (dead-lettered, never a member
// in Redis); the fan-out's member table applied it and pushed the group's
// messages to a user who is not a member. It skips it too.
func TestTheFanoutSkipsAMemberRecordThatIsPoison(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	const g = "g1"
	join := p.member(t, g, "alice", schema.OpJoin)
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(p.broker.Addr()), Topic: topics.Members,
		Balancer: topics.Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	rogue := schema.Member{Gid: g, Uid: "eve", Op: schema.OpJoin, Pos: join.Pos, At: time.Now().UnixMilli(), By: "x"}
	if err := w.WriteMessages(ctx, kafka.Message{Key: schema.MemberKey("other", "eve"), Value: schema.AppendMember(nil, &rogue)}); err != nil {
		t.Fatal(err)
	}
	mp, _ := p.memberProjector(t)
	waitFor(t, "the member projector dead-letters the mis-keyed join", 20*time.Second, func() bool { return mp.Stats().DeadLettered == 1 })
	if m, _ := p.redis.Membership(ctx, g, "eve", nil); m.State != store.MemberNone {
		t.Fatalf("eve in Redis: %+v; want none", m)
	}

	n1 := subscribeNode(t, p.redis, "n1")
	p.online(t, "n1", "alice", "eve")
	p.fanout(t, &Fanout{})
	p.probe(t, n1)
	m1 := p.say(t, g, "alice", "", time.Now())
	p.online(t, "n1", "bob")
	p.member(t, g, "bob", schema.OpJoin)
	m2 := p.say(t, g, "alice", "", time.Now())
	waitFor(t, "bob gets m2", 20*time.Second, func() bool { return n1.has("bob", g, m2) })
	if n1.has("eve", g, m1) || n1.has("eve", g, m2) {
		t.Fatalf("eve, not a member of %s (the member projector dead-lettered her join keyed %q), was pushed its messages: %v",
			g, schema.MemberKey("other", "eve"), n1.pushed("eve", g))
	}
}

// A chat.members record with no value (a tombstone, which chatd never
// writes) is poison to the member projector: dead-lettered, bob stays a
// member in Redis (he may send, pull, ack). The fan-out's member table
// deleted his membership and stopped pushing to him; it skips it too.
func TestTheFanoutSkipsAMemberTombstoneAsTheProjectorDoes(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	const g = "g1"
	p.member(t, g, "alice", schema.OpJoin)
	p.member(t, g, "bob", schema.OpJoin)
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(p.broker.Addr()), Topic: topics.Members,
		Balancer: topics.Balancer{}, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: schema.MemberKey(g, "bob"), Value: nil}); err != nil {
		t.Fatal(err)
	}
	mp, _ := p.memberProjector(t)
	waitFor(t, "the member projector dead-letters the tombstone", 20*time.Second, func() bool { return mp.Stats().DeadLettered == 1 })
	if m, _ := p.redis.Membership(ctx, g, "bob", nil); m.State != store.MemberJoined {
		t.Fatalf("bob in Redis: %+v; want joined", m)
	}

	n1 := subscribeNode(t, p.redis, "n1")
	p.online(t, "n1", "alice", "bob", "carol")
	p.fanout(t, &Fanout{})
	p.probe(t, n1)
	p.member(t, g, "carol", schema.OpJoin)
	m := p.say(t, g, "alice", "", time.Now())
	waitFor(t, "carol gets m", 20*time.Second, func() bool { return n1.has("carol", g, m) })
	time.Sleep(500 * time.Millisecond)
	if !n1.has("bob", g, m) {
		t.Fatalf("bob, a member of %s in Redis (the member projector dead-lettered the tombstone keyed %q), was not pushed its message %d: the fan-out's member table deleted him",
			g, schema.MemberKey(g, "bob"), m)
	}
}
