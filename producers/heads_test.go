package producers

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// When chat.messages' log goes back (a broker that lost its unsynced tail,
// a topic recreated), offsets are handed out again: the heads and keys the
// producer learnt of the old log must not answer for the new one, or the
// gateway takes an ack past the group's newest message and refuses one of
// a message it has.
func TestHeadsAreForgottenWhenTheLogGoesBack(t *testing.T) {
	b, p := setup(t, 1)
	ctx := context.Background()
	send := func(gid string, n int) []int64 {
		t.Helper()
		ms := make([]schema.Message, n)
		for i := range ms {
			ms[i] = schema.Message{Gid: gid, Sender: "u1", ClientMsgID: fmt.Sprintf("%s-%d-%d", gid, i, time.Now().UnixNano()), Body: []byte("x")}
		}
		ids, err := p.SendMessages(ctx, ms)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	send("a", 1)
	old := send("b", 3) // offsets 1..3, one batch
	if ok, err := p.IsMessageOf(ctx, "b", old[1]); err != nil || !ok {
		t.Fatalf("IsMessageOf(b, %d) = %v, %v; want true", old[1], ok, err)
	}

	// The log starts again from offset 0.
	c := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(b.Addr()), Timeout: 10 * time.Second}
	if _, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topics.Messages}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the topic to be gone", func() bool {
		md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topics.Messages}})
		return err == nil && (len(md.Topics) == 0 || md.Topics[0].Error != nil)
	})
	if err := topics.Ensure(ctx, topics.Config{Brokers: []string{b.Addr()}, Partitions: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var now []int64 // offsets 0..2 again
	waitFor(t, "a send into the new topic", func() bool {
		ms := make([]schema.Message, 3)
		for i := range ms {
			ms[i] = schema.Message{Gid: "a", Sender: "u1", ClientMsgID: fmt.Sprintf("new-%d", i), Body: []byte("x")}
		}
		var err error
		now, err = p.SendMessages(ctx, ms)
		return err == nil
	})
	if now[2] >= old[2] {
		t.Fatalf("the new log reached %d, want it below the old head %d", now[2], old[2])
	}

	if h, err := p.HeadAtLeast(ctx, "b", old[2]); err != nil || h >= old[2] {
		t.Errorf("HeadAtLeast(b, %d) = %d, %v; the log ends at %d", old[2], h, err, now[2])
	}
	if ok, err := p.IsMessageOf(ctx, "a", now[2]); err != nil || !ok {
		t.Errorf("IsMessageOf(a, %d) = %v, %v; the record there is a's", now[2], ok, err)
	}
	if ok, err := p.IsMessageOf(ctx, "b", now[1]); err != nil || ok {
		t.Errorf("IsMessageOf(b, %d) = %v, %v; the record there is a's", now[1], ok, err)
	}
}

// A head this producer learnt from the old log, before the log went back
// and with no send of its own since, still answers HeadAtLeast; the look-up
// of the record past the new end must then answer "not a message", and
// correct the head, rather than fail: the gateway would tell the member to
// retry an ack past the group's head for ever.
func TestARecordPastTheEndOfALogThatWentBackIsNoMessage(t *testing.T) {
	b, p := setup(t, 1)
	ctx := context.Background()
	ms := make([]schema.Message, 4)
	for i := range ms {
		ms[i] = schema.Message{Gid: "b", Sender: "u1", ClientMsgID: fmt.Sprint("c", i), Body: []byte("x")}
	}
	old, err := p.SendMessages(ctx, ms)
	if err != nil {
		t.Fatal(err)
	}
	recreate(t, b.Addr())
	q, err := New(Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	waitFor(t, "a send into the new topic", func() bool {
		_, err := q.SendMessage(ctx, &schema.Message{Gid: "a", Sender: "u1", Body: []byte("x")})
		return err == nil
	})
	waitFor(t, "p to see the new topic", func() bool { // its transport keeps metadata for a while
		_, err := p.fetchKeys(ctx, 0, 0)
		return err == nil
	})
	if ok, err := p.IsMessageOf(ctx, "b", old[3]); err != nil || ok {
		t.Errorf("IsMessageOf(b, %d) past the end of the new log = %v, %v; want false, nil", old[3], ok, err)
	}
	if h, err := p.HeadAtLeast(ctx, "b", old[3]); err != nil || h != 0 {
		t.Errorf("HeadAtLeast(b, %d) = %d, %v; the new log ends at 0", old[3], h, err)
	}
}

// recreate deletes chat.messages and creates it again, empty.
func recreate(t *testing.T, addr string) {
	t.Helper()
	ctx := context.Background()
	c := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(addr), Timeout: 10 * time.Second}
	if _, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topics.Messages}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the topic to be gone", func() bool {
		md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topics.Messages}})
		return err == nil && (len(md.Topics) == 0 || md.Topics[0].Error != nil)
	})
	if err := topics.Ensure(ctx, topics.Config{Brokers: []string{addr}, Partitions: 1}, nil); err != nil {
		t.Fatal(err)
	}
}

// The embedded broker without SyncWrites can come back from a crash with
// the tail of its log gone: the offsets of the lost records go to the next
// ones. The producer goes on sending, and forgets the heads it knew.
func TestSendsGoOnWhenTheBrokerLostItsTail(t *testing.T) {
	dir, saved := t.TempDir(), t.TempDir()
	start := func(listen string) *broker.Broker {
		t.Helper()
		b, err := broker.Start(broker.Config{Listen: listen, DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := start("")
	addr := b.Addr()
	if err := topics.Ensure(context.Background(), topics.Config{Brokers: []string{addr}, Partitions: 1}, nil); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Brokers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	send := func(gid string, i int) (int64, error) {
		return p.SendMessage(ctx, &schema.Message{Gid: gid, Sender: "u1", ClientMsgID: fmt.Sprint("c", i), Body: []byte("x")})
	}
	for i := range 3 {
		if _, err := send("a", i); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	if err := os.CopyFS(saved, os.DirFS(dir)); err != nil { // what a crash leaves
		t.Fatal(err)
	}
	b = start(addr)
	var last int64
	for i := 3; i < 6; i++ {
		waitFor(t, "a send", func() bool { last, err = send("b", i); return err == nil })
	}
	b.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, os.DirFS(saved)); err != nil {
		t.Fatal(err)
	}
	os.Remove(dir + "/.lock")
	b = start(addr)
	defer b.Close()

	var id int64
	waitFor(t, "a send after the loss", func() bool { id, err = send("a", 9); return err == nil })
	if id != 3 {
		t.Fatalf("the send after the loss got msgid %d, want 3 (the log kept 0..2)", id)
	}
	if h, err := p.HeadAtLeast(ctx, "b", last); err != nil || h >= last {
		t.Errorf("HeadAtLeast(b, %d) = %d, %v; the log ends at %d", last, h, err, id)
	}
	if ok, err := p.IsMessageOf(ctx, "b", id); err != nil || ok {
		t.Errorf("IsMessageOf(b, %d) = %v, %v; the record there is a's", id, ok, err)
	}
}
