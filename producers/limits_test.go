package producers

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

func readAll(t *testing.T, b *broker.Broker, part int) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", b.Addr(), topics.Messages, part)
	if err != nil {
		t.Fatal(err)
	}
	end, err := conn.ReadLastOffset()
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, Topic: topics.Messages, Partition: part, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []kafka.Message
	for int64(len(out)) < end {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// Sends that queue behind a request in flight leave together: the batch
// limit must count the records' framing, or a batch of 64 sends of 16 KiB
// (the gateway's default body limit), within a limit that counted keys and
// values only, is refused by the broker as too large.
func TestABatchOfQueuedSendsFitsTheBroker(t *testing.T) {
	p, s := watchProduces(t, 1)
	ctx := context.Background()
	if _, err := p.SendMessage(ctx, msg("g1", 0)); err != nil {
		t.Fatal(err)
	}
	mk := func(i int) *schema.Message {
		m := msg("g1", i)
		m.Body = nil
		over := len(schema.MessageKey("g1")) + len(schema.AppendMessage(nil, m))
		for {
			m.Body = bytes.Repeat([]byte("x"), 16384-over)
			n := len(schema.MessageKey("g1")) + len(schema.AppendMessage(nil, m))
			if n == 16384 {
				return m
			}
			over += n - 16384
		}
	}
	release := s.holdNext()
	held := make(chan error, 1)
	go func() { _, err := p.SendMessage(ctx, msg("g1", 1)); held <- err }()
	waitFor(t, "the held request", func() bool { return len(s.get()) == 2 })
	const n = 64
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { _, err := p.SendMessage(ctx, mk(2+i)); errs <- err }()
	}
	waitFor(t, "the sends to queue", func() bool { return p.waiting(topics.Messages, 0) == n })
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	failed := 0
	var first error
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			failed++
			first = err
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d sends of 16 KiB failed: %v", failed, n, first)
	}
}

// The largest body the producer takes, with ids of the longest allowed
// size, fits one record batch.
func TestTheLargestBodyTakenFitsTheBroker(t *testing.T) {
	_, p := setup(t, 1)
	long := strings.Repeat("x", schema.MaxIDLen)
	m := &schema.Message{Gid: long, Sender: long, ClientMsgID: long, SentAt: 1, Body: bytes.Repeat([]byte("x"), MaxBody)}
	if _, err := p.SendMessage(context.Background(), m); err != nil {
		t.Fatalf("a message the producer and gateway accept as valid: %v", err)
	}
}

func TestABodyPastTheLimitIsRefusedBeforeTheBroker(t *testing.T) {
	_, p := setup(t, 1)
	m := msg("g1", 0)
	m.Body = bytes.Repeat([]byte("x"), MaxBody+1)
	if _, err := p.SendMessage(context.Background(), m); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("a body past MaxBody: %v, want a refusal naming the limit", err)
	}
}

// Sends whose ctx ends while they wait behind a stalled request are taken
// back: written later, they would land long after their callers were told
// they failed (and the callers' resends would be written again), and the
// queue would grow without bound while the broker stalls.
func TestSendsAbandonedWhileQueuedAreNotWritten(t *testing.T) {
	b, p := setup(t, 1)
	c := b.Cluster()
	release, stalled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() { close(stalled); c.SleepControl(func() { <-release }) })
		return nil, nil, false
	})
	ctx := context.Background()
	held := make(chan error, 1)
	go func() { _, err := p.SendMessage(ctx, msg("g1", 0)); held <- err }()
	select { // the sends below queue behind it, not in its request
	case <-stalled:
	case <-time.After(20 * time.Second):
		t.Fatal("the first send's request never reached the broker")
	}
	const n = 200
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if _, err := p.SendMessage(cctx, msg("g1", 1+i)); err == nil {
				t.Error("a send succeeded with the broker stalled")
			}
		}()
	}
	wg.Wait()
	queued := p.waiting(topics.Messages, 0)
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// A send after them on the same partition leaves after anything still
	// queued ahead of it: once it is written, so is any abandoned send.
	last, err := p.SendMessage(ctx, msg("g1", 1+n))
	if err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, b, 0)
	if queued != 0 || len(recs) != 2 || last != 1 {
		t.Fatalf("%d sends gave up before leaving: %d jobs still queued after they returned, and %d records written with the send after them at %d; want 0 queued, 2 written, the send after them at 1",
			n, queued, len(recs), last)
	}
}

func cmidsOf(t *testing.T, recs []kafka.Message) []string {
	t.Helper()
	var out []string
	for _, r := range recs {
		m, err := schema.DecodeMessage(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%s", r.Offset, m.ClientMsgID))
	}
	return out
}

// The broker appends a batch and answers "timed out" (a real broker does
// with acks=all when followers are slow): the retry carries the same
// producer id and sequence, so it is not appended again, and the sender is
// told the offset of the one record.
func TestARetryOfAnAppendedBatchIsNotAppendedAgain(t *testing.T) {
	b, p := setup(t, 1)
	h := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topics.Messages, Err: kerr.RequestTimedOut, Count: 1})
	id, err := p.SendMessage(context.Background(), msg("g1", 0))
	if err != nil {
		t.Fatal(err)
	}
	if h.Hits() != 1 {
		t.Fatal("fault not hit")
	}
	recs := cmidsOf(t, readAll(t, b, 0))
	if len(recs) != 1 || id != 0 {
		t.Fatalf("one acknowledged send: log holds %v, sender told msgid %d; want exactly one record, at the msgid returned", recs, id)
	}
}

// A request slower than the write timeout is retried on a new connection
// while the first may still land, after the send queued behind it: with
// the same sequence the late copy is a duplicate the broker drops, and the
// log holds each send once, in order.
func TestARequestThatLandsAfterItsRetryIsDropped(t *testing.T) {
	b, p := setup(t, 1)
	p.cfg.WriteTimeout = 300 * time.Millisecond
	c := b.Cluster()
	release, woke := make(chan struct{}), make(chan struct{})
	var n atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if n.Add(1) == 1 {
			c.SleepControl(func() { <-release })
			close(woke)
		}
		return nil, nil, false
	})
	ctx := context.Background()
	a, errA := p.SendMessage(ctx, msg("g1", 0)) // A: times out once, retried
	bID, errB := p.SendMessage(ctx, msg("g1", 1))
	close(release)
	// The broker takes one request at a time, and none other while a woken
	// control runs: once the late copy's control goes on past its sleep,
	// the broker handles that copy before any request it takes after,
	// readAll's among them.
	select {
	case <-woke:
	case <-time.After(20 * time.Second):
		t.Fatal("the first request of A never came back to the broker")
	}
	if errA != nil || errB != nil {
		t.Fatalf("sends: %v, %v", errA, errB)
	}
	recs := cmidsOf(t, readAll(t, b, 0))
	if len(recs) != 2 {
		t.Fatalf("two acknowledged sends (A at %d, B at %d): the log holds %v; want [0:c0 1:c1]", a, bID, recs)
	}
}

// A lane that gives up on a request moves to its next epoch: the sends
// after it go on at once (the broker takes the new epoch from sequence 0),
// and the one given up on is in the log at most once.
func TestSendsGoOnAfterALaneGaveUpOnARequest(t *testing.T) {
	b, p := setup(t, 1)
	h := b.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topics.Messages, Err: kerr.RequestTimedOut, Count: p.cfg.MaxAttempts})
	if _, err := p.SendMessage(context.Background(), msg("g1", 0)); err == nil {
		t.Fatal("a send whose every attempt timed out succeeded")
	}
	if h.Hits() != p.cfg.MaxAttempts {
		t.Fatalf("fault hit %d times, want %d", h.Hits(), p.cfg.MaxAttempts)
	}
	id, err := p.SendMessage(context.Background(), msg("g1", 1))
	if err != nil {
		t.Fatalf("the send after the lane gave up: %v", err)
	}
	recs := cmidsOf(t, readAll(t, b, 0))
	if fmt.Sprint(recs) != fmt.Sprintf("[0:c0 %d:c1]", id) || id != 1 {
		t.Fatalf("log %v, second send at %d; want c0 once, then c1", recs, id)
	}
}

// One call may hand a partition more records than one produce request
// carries (a projector appending again the cursors a replayed batch left
// behind: up to its batch of 10000). They go in as many requests as the
// limits need, in order, instead of one the broker refuses for good.
func TestOneCallOfMoreThanARequestCarriesIsSplit(t *testing.T) {
	b, p := setup(t, 1)
	ctx := context.Background()
	long := strings.Repeat("u", schema.MaxIDLen-8)
	acks := make([]schema.Ack, 10000)
	for i := range acks {
		acks[i] = schema.Ack{Gid: "g1", Uid: fmt.Sprintf("%s%08d", long, i), Upto: int64(i), At: 1}
	}
	if err := p.SendAcks(ctx, acks...); err != nil {
		t.Fatalf("10000 acks in one call: %v", err)
	}
	ms := make([]schema.Message, 3000)
	for i := range ms {
		ms[i] = schema.Message{Gid: "g1", Sender: long, ClientMsgID: fmt.Sprintf("%s%08d", long, i), Body: bytes.Repeat([]byte("x"), 300)}
	}
	ids, err := p.SendMessages(ctx, ms)
	if err != nil {
		t.Fatalf("3000 messages of 600 bytes in one call: %v", err)
	}
	recs := readAll(t, b, 0)
	if len(recs) != len(ms) {
		t.Fatalf("chat.messages holds %d records, want %d", len(recs), len(ms))
	}
	for i, id := range ids {
		got, err := schema.DecodeMessage(recs[id].Value)
		if err != nil || got.ClientMsgID != ms[i].ClientMsgID {
			t.Fatalf("msgid %d of send %d holds %q (%v), want %q", id, i, got.ClientMsgID, err, ms[i].ClientMsgID)
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("msgid %d after %d: out of order", id, ids[i-1])
		}
	}
}
