package producers

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
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
	release := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() { c.SleepControl(func() { <-release }) })
		return nil, nil, false
	})
	ctx := context.Background()
	held := make(chan error, 1)
	go func() { _, err := p.SendMessage(ctx, msg("g1", 0)); held <- err }()
	time.Sleep(200 * time.Millisecond)
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
	time.Sleep(300 * time.Millisecond)
	recs := readAll(t, b, 0)
	if queued != 0 || len(recs) != 1 {
		t.Fatalf("%d sends gave up before leaving: %d jobs still queued after they returned, and %d records written; want 0 queued, 1 written",
			n, queued, len(recs))
	}
}
