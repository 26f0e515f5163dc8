package producers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// produceSizes records the number of records of every produce request the
// embedded broker handles; hold, when set, keeps the next request from
// being answered until it is closed.
type produceSizes struct {
	mu    sync.Mutex
	sizes []int
	hold  chan struct{}
}

func (s *produceSizes) get() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sizes)
}

func (s *produceSizes) holdNext() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = make(chan struct{})
	return s.hold
}

func (p *Producer) waiting(topic string, part int) int {
	l := p.lane(topic, part)
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiting)
}

func watchProduces(t *testing.T, partitions int) (*Producer, *produceSizes) {
	t.Helper()
	b, p := setup(t, partitions)
	s := &produceSizes{}
	c := b.Cluster()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := 0
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, pp := range tp.Partitions {
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(pp.Records); err != nil {
					t.Errorf("produce request with an unreadable batch: %v", err)
				}
				n += int(rb.NumRecords)
			}
		}
		s.mu.Lock()
		s.sizes = append(s.sizes, n)
		hold := s.hold
		s.hold = nil
		s.mu.Unlock()
		if hold != nil {
			c.SleepControl(func() { <-hold })
		}
		return nil, nil, false // the broker handles it as usual
	})
	return p, s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func msg(gid string, i int) *schema.Message {
	return &schema.Message{Gid: gid, Sender: "u1", ClientMsgID: fmt.Sprintf("c%d", i), SentAt: time.Now().UnixMilli(), Body: []byte("hi")}
}

// TestSendsQueuedBehindARequestInFlightLeaveTogether: a lone send is its
// own request (no linger), sends that arrive while their partition's
// request is in flight go together in the next one, in the order they
// came, and the batch limit splits them.
func TestSendsQueuedBehindARequestInFlightLeaveTogether(t *testing.T) {
	p, s := watchProduces(t, 2)
	p.cfg.BatchSize = 15
	ctx := context.Background()
	first, err := p.SendMessage(ctx, msg("g1", 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.get(); !slices.Equal(got, []int{1}) {
		t.Fatalf("a lone send made requests of %v records, want [1]", got)
	}

	release := s.holdNext()
	held := make(chan error, 1)
	go func() { _, err := p.SendMessage(ctx, msg("g1", 1)); held <- err }()
	waitFor(t, "the held request", func() bool { return len(s.get()) == 2 })
	part := topics.Partition("g1", 2)
	ids := make([]int64, 20)
	errs := make(chan error, len(ids))
	for i := range ids {
		go func() {
			var err error
			ids[i], err = p.SendMessage(ctx, msg("g1", 2+i))
			errs <- err
		}()
		waitFor(t, "the send to queue", func() bool { return p.waiting(topics.Messages, part) == i+1 })
	}
	close(release)
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if got, want := s.get(), []int{1, 1, 15, 5}; !slices.Equal(got, want) {
		t.Fatalf("requests of %v records, want %v (1 alone, 1 held, the 20 queued behind it in batches of 15)", got, want)
	}
	for i, id := range ids {
		if want := first + 2 + int64(i); id != want {
			t.Fatalf("queued send %d got msgid %d, want %d: the queue's order is the log's", i, id, want)
		}
	}
}

// TestASendAcrossPartitionsGetsEveryOffset: SendMessages splits its
// records by partition and answers each record's own msgid.
func TestASendAcrossPartitionsGetsEveryOffset(t *testing.T) {
	p, s := watchProduces(t, 4)
	ctx := context.Background()
	var ms []schema.Message
	for i := 0; i < 12; i++ {
		ms = append(ms, *msg(fmt.Sprintf("g%d", i%3), i))
	}
	ids, err := p.SendMessages(ctx, ms)
	if err != nil {
		t.Fatal(err)
	}
	parts := map[int]bool{}
	for _, g := range []string{"g0", "g1", "g2"} {
		parts[topics.Partition(g, 4)] = true
	}
	if got := len(s.get()); got != len(parts) {
		t.Fatalf("%d produce requests for %d partitions, want one each", got, len(parts))
	}
	last := map[string]int64{}
	for i, id := range ids {
		gid := ms[i].Gid
		if prev, ok := last[gid]; ok && id <= prev {
			t.Fatalf("%s: msgid %d after %d", gid, id, prev)
		}
		last[gid] = id
		if h, err := p.HeadAtLeast(ctx, gid, id); err != nil || h < id {
			t.Fatalf("HeadAtLeast(%s, %d) = %d, %v", gid, id, h, err)
		}
	}
}

// TestCloseWaitsForSendsInFlight: Close returns after the request in
// flight is answered, and a send after it fails with ErrClosed.
func TestCloseWaitsForSendsInFlight(t *testing.T) {
	p, s := watchProduces(t, 1)
	ctx := context.Background()
	if _, err := p.SendMessage(ctx, msg("g1", 0)); err != nil {
		t.Fatal(err)
	}
	release := s.holdNext()
	sent := make(chan error, 1)
	go func() { _, err := p.SendMessage(ctx, msg("g1", 1)); sent <- err }()
	waitFor(t, "the held request", func() bool { return len(s.get()) == 2 })
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned with a send in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-sent; err != nil {
		t.Fatalf("the send in flight at Close: %v", err)
	}
	<-closed
	if _, err := p.SendMessage(ctx, msg("g1", 2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("a send after Close: %v, want ErrClosed", err)
	}
}

// TestARetriedRequestWritesTheWholeRecords: the broker refuses the first
// request with a temporary error; the retry writes every record with its
// key and value (a kafka.Record's are readers, drained by the first try).
func TestARetriedRequestWritesTheWholeRecords(t *testing.T) {
	b, p := setup(t, 1)
	c := b.Cluster()
	var refused atomic.Bool
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if !refused.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotLeaderForPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx := context.Background()
	want := msg("g1", 0)
	id, err := p.SendMessage(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	if !refused.Load() {
		t.Fatal("the broker refused no request: the test tested nothing")
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{b.Addr()}, Topic: topics.Messages, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(id); err != nil {
		t.Fatal(err)
	}
	rec, err := r.FetchMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeMessage(rec.Value)
	if err != nil {
		t.Fatalf("the record at msgid %d after a retry: %v (%d bytes of value, key %q)", id, err, len(rec.Value), rec.Key)
	}
	if got.ClientMsgID != want.ClientMsgID || string(got.Body) != string(want.Body) || string(rec.Key) != string(schema.MessageKey("g1")) {
		t.Fatalf("the record at msgid %d after a retry: %+v key %q, want %+v", id, got, rec.Key, want)
	}
}
