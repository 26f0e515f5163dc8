package producers

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

func setup(tb testing.TB, partitions int) (*broker.Broker, *Producer) {
	tb.Helper()
	b := testserver.NewBroker(tb)
	if err := topics.Ensure(context.Background(), topics.Config{Brokers: []string{b.Addr()}, Partitions: partitions}, nil); err != nil {
		tb.Fatal(err)
	}
	p, err := New(Config{Brokers: []string{b.Addr()}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return b, p
}

func TestSendMessageReturnsTheRecordsOffset(t *testing.T) {
	b, p := setup(t, 4)
	ctx := context.Background()
	last := map[string]int64{}
	for i := 0; i < 40; i++ {
		gid := fmt.Sprintf("g%d", i%7)
		m := schema.Message{Gid: gid, Sender: "u1", ClientMsgID: fmt.Sprintf("c%d", i), SentAt: time.Now().UnixMilli(), Body: []byte("hi")}
		id, err := p.SendMessage(ctx, &m)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[gid]; ok && id <= prev {
			t.Fatalf("group %s: msgid %d after %d, want strictly increasing", gid, id, prev)
		}
		last[gid] = id
		// The record at (partition of gid, msgid) is the message we sent.
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, Topic: topics.Messages,
			Partition: topics.Partition(gid, 4), MaxWait: 100 * time.Millisecond})
		if err := r.SetOffset(id); err != nil {
			t.Fatal(err)
		}
		rec, err := r.FetchMessage(ctx)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		got, err := schema.DecodeMessage(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if got.ClientMsgID != m.ClientMsgID || got.Gid != gid || rec.Offset != id {
			t.Fatalf("record at %d is %+v, want %+v", id, got, m)
		}
	}
	head, err := p.Head(ctx, "g3")
	if err != nil {
		t.Fatal(err)
	}
	if head < last["g3"] {
		t.Fatalf("Head(g3) = %d, below its last msgid %d", head, last["g3"])
	}
}

func TestSendRejectsInvalidIDs(t *testing.T) {
	_, p := setup(t, 1)
	_, err := p.SendMessage(context.Background(), &schema.Message{Gid: "bad/gid", Sender: "u"})
	if err == nil {
		t.Fatal("a gid with / was sent")
	}
}

// What the consumers' decoders would refuse is refused before it reaches a
// topic: a record there that no consumer can use goes to the dead letters,
// and a message a sender was given a msgid for would never be delivered.
func TestSendRefusesWhatConsumersCannotDecode(t *testing.T) {
	_, p := setup(t, 1)
	ctx := context.Background()
	for name, send := range map[string]func() error{
		"a message whose body is not UTF-8": func() error {
			_, err := p.SendMessage(ctx, &schema.Message{Gid: "g", Sender: "u", Body: []byte("\xff")})
			return err
		},
		"an ack below -1":       func() error { return p.SendAcks(ctx, schema.Ack{Gid: "g", Uid: "u", Upto: -2}) },
		"an ack with a bad gid": func() error { return p.SendAcks(ctx, schema.Ack{Gid: "g/x", Uid: "u", Upto: 1}) },
		"a receipt without uid": func() error { return p.SendReceipts(ctx, schema.Receipt{Gid: "g", Upto: 1}) },
		"a member with no op":   func() error { return p.SendMembers(ctx, schema.Member{Gid: "g", Uid: "u", Pos: -1}) },
		"a join with a position": func() error {
			return p.SendMembers(ctx, schema.Member{Gid: "g", Uid: "u", Op: schema.OpJoin, HasJoined: true})
		},
	} {
		if err := send(); err == nil {
			t.Errorf("%s was sent", name)
		}
	}
	for _, topic := range []string{topics.Messages, topics.Acks, topics.Receipts, topics.Members} {
		resp, err := p.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}}})
		if err != nil {
			t.Fatal(err)
		}
		if end := resp.Topics[topic][0].LastOffset; end != 0 {
			t.Errorf("%s holds %d records, want none", topic, end)
		}
	}
}

func TestJoinAndLeaveRecordTheHead(t *testing.T) {
	_, p := setup(t, 2)
	ctx := context.Background()
	empty, err := p.Join(ctx, "g1", "u1", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if empty.Pos != -1 {
		t.Fatalf("join on an empty partition at %d, want -1", empty.Pos)
	}
	id, err := p.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "u1", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.Join(ctx, "g1", "u2", "admin")
	if err != nil {
		t.Fatal(err)
	}
	if m.Pos != id || m.Op != schema.OpJoin || m.HasJoined {
		t.Fatalf("join after msgid %d recorded as %+v", id, m)
	}
	l, err := p.Leave(ctx, "g1", "u1", empty.Pos, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if want := (schema.Member{Gid: "g1", Uid: "u1", Op: schema.OpLeave, Pos: id, At: l.At, By: "admin", HasJoined: true, Joined: -1}); l != want {
		t.Fatalf("leave after msgid %d recorded as %+v, want %+v", id, l, want)
	}
	// A join past the head means the store and the topic disagree: the
	// leave is refused rather than written as a record no one can decode.
	if _, err := p.Leave(ctx, "g1", "u2", id+1, "admin"); err == nil || !strings.Contains(err.Error(), "chatctl rebuild members") {
		t.Fatalf("a leave naming a join past the head: %v, want a refusal saying what to do", err)
	}
}

// HeadAtLeast answers from what the producer knows when that suffices, and
// asks the broker only for a position beyond it.
func TestHeadAtLeastAsksTheBrokerOnlyBeyondWhatItKnows(t *testing.T) {
	b, p := setup(t, 2)
	ctx := context.Background()
	var id int64
	for i := range 5 {
		var err error
		if id, err = p.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "u1", ClientMsgID: fmt.Sprint(i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	// A second producer sends into the same partition behind p's back.
	q, err := New(Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	later, err := q.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "u2", Body: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := p.HeadAtLeast(ctx, "g1", later); err != nil || h != later {
		t.Fatalf("HeadAtLeast(g1, %d) = %d, %v; want the broker's head %d", later, h, err, later)
	}

	b.Close() // from here on only what p knows answers
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if h, err := p.HeadAtLeast(cctx, "g1", id); err != nil || h < id {
		t.Errorf("HeadAtLeast(g1, %d) with the broker gone = %d, %v; want its own send's %d known", id, h, err, id)
	}
	if h, err := p.HeadAtLeast(cctx, "g1", later+1); err == nil {
		t.Errorf("HeadAtLeast(g1, %d) beyond the log answered %d without the broker", later+1, h)
	}
}

// IsMessageOf tells a group's messages from those of the other groups of
// its partition, also inside a batch of several records, and finds none
// past the end of the log.
func TestIsMessageOfTellsTheGroupsOfAPartitionApart(t *testing.T) {
	_, p := setup(t, 1)
	ctx := context.Background()
	gidOf := map[int64]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 40 { // sent at once: they share batches
		wg.Add(1)
		go func() {
			defer wg.Done()
			gid := fmt.Sprint("g", i%3)
			id, err := p.SendMessage(ctx, &schema.Message{Gid: gid, Sender: "u1", ClientMsgID: fmt.Sprint(i), Body: []byte("x")})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			gidOf[id] = gid
			mu.Unlock()
		}()
	}
	wg.Wait()
	for id, gid := range gidOf {
		for _, g := range []string{"g0", "g1", "g2"} {
			if ok, err := p.IsMessageOf(ctx, g, id); err != nil || ok != (g == gid) {
				t.Errorf("IsMessageOf(%s, %d) = %v, %v; the record is %s's", g, id, ok, err, gid)
			}
		}
	}
	if ok, err := p.IsMessageOf(ctx, "g0", int64(len(gidOf))); err != nil || ok {
		t.Errorf("IsMessageOf past the end of the log = %v, %v; want false", ok, err)
	}
}

func BenchmarkSendMessageSerial(b *testing.B) {
	_, p := setup(b, 8)
	ctx := context.Background()
	m := schema.Message{Gid: "g1", Sender: "u1", Body: make([]byte, 200)}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.SendMessage(ctx, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSendMessageParallel(b *testing.B) {
	_, p := setup(b, 8)
	sendParallel(b, p)
}

// sendParallel sends b.N messages of 200 bytes to 100 groups from 64
// goroutines, as a gateway's, and reports them a second.
func sendParallel(b *testing.B, p *Producer) {
	ctx := context.Background()
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			m := schema.Message{Gid: fmt.Sprintf("g%d", i%100), Sender: "u1", Body: make([]byte, 200)}
			if _, err := p.SendMessage(ctx, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// TestObserveTimesEverySendByTopic: the hook behind chat_store_seconds
// {store="kafka"} sees each send once, under its topic, including a send
// that fails.
func TestObserveTimesEverySendByTopic(t *testing.T) {
	b := testserver.NewBroker(t)
	if err := topics.Ensure(context.Background(), topics.Config{Brokers: []string{b.Addr()}, Partitions: 2}, nil); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	p, err := New(Config{Brokers: []string{b.Addr()}, Observe: func(topic string, d time.Duration) {
		if d <= 0 {
			t.Errorf("%s: observed %v, want a positive duration", topic, d)
		}
		mu.Lock()
		seen[topic]++
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	now := time.Now().UnixMilli()
	if _, err := p.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "u1", ClientMsgID: "c1", SentAt: now, Body: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if err := p.SendAcks(ctx, schema.Ack{Gid: "g1", Uid: "u1", Upto: 0, At: now}, schema.Ack{Gid: "g1", Uid: "u2", Upto: 0, At: now}); err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if err := p.SendReceipts(gone, schema.Receipt{Gid: "g1", Uid: "u1", Upto: 0, At: now}); err == nil {
		t.Fatal("a send with a cancelled context succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{topics.Messages: 1, topics.Acks: 1, topics.Receipts: 1}
	if !maps.Equal(seen, want) {
		t.Fatalf("observed %v, want %v", seen, want)
	}
}
