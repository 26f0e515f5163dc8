package consumers

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// kafkaEnv is an in-process broker with the chat.* topics and a producer.
type kafkaEnv struct {
	broker *broker.Broker
	prod   *producers.Producer
	parts  int
}

func newKafka(t testing.TB, partitions int) *kafkaEnv {
	t.Helper()
	b := testserver.NewBroker(t)
	if err := topics.Ensure(context.Background(), topics.Config{Brokers: []string{b.Addr()}, Partitions: partitions}, nil); err != nil {
		t.Fatal(err)
	}
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &kafkaEnv{broker: b, prod: p, parts: partitions}
}

func (k *kafkaEnv) brokers() []string { return []string{k.broker.Addr()} }

func runAcks(t *testing.T, k *kafkaEnv, group string, h *memAcks) (*Runner[schema.Ack], func()) {
	t.Helper()
	return runAcksWith(t, k, group, h, h, nil)
}

// runAcksWith runs handler on chat.acks with the test settings, positions
// in offsets, and tune's changes to the config (nil: none).
func runAcksWith(t *testing.T, k *kafkaEnv, group string, handler Handler[schema.Ack], offsets OffsetStore, tune func(*Config[schema.Ack])) (*Runner[schema.Ack], func()) {
	t.Helper()
	cfg := Config[schema.Ack]{
		Brokers: k.brokers(), Group: group, Topic: topics.Acks,
		Decode: schema.DecodeAck, Handler: handler, Offsets: offsets, DeadLetter: k.prod,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second,
		StateCheck: 100 * time.Millisecond,
	}
	if tune != nil {
		tune(&cfg)
	}
	r, err := NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, start(t, r.Run)
}

// start runs fn in the background and returns an idempotent stop that
// cancels it and waits for it to return; the test's cleanup stops it too.
func start(t *testing.T, fn func(context.Context) error) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run returned %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sendAcks(t *testing.T, k *kafkaEnv, n int) {
	t.Helper()
	acks := make([]schema.Ack, n)
	for i := range acks {
		acks[i] = schema.Ack{Gid: fmt.Sprintf("g%d", i%13), Uid: fmt.Sprintf("u%d", i%5), Upto: int64(i), At: 1}
	}
	if err := k.prod.SendAcks(context.Background(), acks...); err != nil {
		t.Fatal(err)
	}
}

func TestRunnerRetriesWithoutCommittingThenDelivers(t *testing.T) {
	k := newKafka(t, 3)
	h := newMemAcks()
	h.failNext = 5
	sendAcks(t, k, 300)
	runAcks(t, k, "acks-test", h)
	waitFor(t, "all 300 acks handled", 20*time.Second, func() bool { return h.handled() == 300 })
	waitFor(t, "the offsets of all 300 acks saved", 5*time.Second, func() bool { return h.savedTotal() == 300 })
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls < 6 {
		t.Fatalf("Handle called %d times; want the 5 failures retried", h.calls)
	}
	for k, v := range h.cursors {
		if v < 0 {
			t.Fatalf("cursor %s = %d", k, v)
		}
	}
}

// TestRunnerCommitsOnInterval: batches handled within one CommitInterval
// share one commit, an idle partition still commits what it handled, and
// a stop saves the last batch at once.
func TestRunnerCommitsOnInterval(t *testing.T) {
	k := newKafka(t, 1)
	h := newMemAcks()
	r, err := NewRunner(Config[schema.Ack]{
		Brokers: k.brokers(), Group: "acks-interval", Topic: topics.Acks,
		Decode: schema.DecodeAck, Handler: h, Offsets: h, DeadLetter: k.prod,
		CommitInterval: 300 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, r.Run)
	waitFor(t, "assignment", 10*time.Second, r.CaughtUp)
	for i := 0; i < 20; i++ { // 20 small batches, 10 ms apart
		sendAcks(t, k, 1)
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, "20 acks handled", 5*time.Second, func() bool { return h.handled() == 20 })
	waitFor(t, "the idle partition's commit", 2*time.Second, func() bool { return h.savedTotal() == 20 })
	st := r.Stats()
	if st.Batches < 5 || st.Commits*2 > st.Batches {
		t.Fatalf("%d batches, %d commits: want batches within an interval to share a commit", st.Batches, st.Commits)
	}
	sendAcks(t, k, 1)
	waitFor(t, "the 21st ack handled", 5*time.Second, func() bool { return h.handled() == 21 })
	stop()
	if got := h.savedTotal(); got != 21 {
		t.Fatalf("offset saved at stop = %d, want 21", got)
	}
}

func TestRunnerDeadLettersPoisonAndKeepsFlowing(t *testing.T) {
	k := newKafka(t, 1)
	ctx := context.Background()
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(k.broker.Addr()), Topic: topics.Acks, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	sendAcks(t, k, 10)
	if err := w.WriteMessages(ctx,
		kafka.Message{Key: []byte("g1/u1"), Value: []byte("garbage")},
		kafka.Message{Key: []byte("g1/u1"), Value: []byte{9, 2, 0}},                                                     // unknown version
		kafka.Message{Key: []byte("g1/u1"), Value: schema.AppendMessage(nil, &schema.Message{Gid: "g1", Sender: "u1"})}, // wrong kind
	); err != nil {
		t.Fatal(err)
	}
	sendAcks(t, k, 10)
	h := newMemAcks()
	r, _ := runAcks(t, k, "acks-poison", h)
	waitFor(t, "the 20 good acks", 20*time.Second, func() bool { return h.handled() == 20 })
	waitFor(t, "3 dead letters counted", 5*time.Second, func() bool { return r.Stats().DeadLettered == 3 })

	dl := kafka.NewReader(kafka.ReaderConfig{Brokers: k.brokers(), Topic: topics.DeadLetter, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer dl.Close()
	for i := 0; i < 3; i++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := dl.FetchMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("dead letter %d: %v", i, err)
		}
		hdr := map[string]string{}
		for _, h := range m.Headers {
			hdr[h.Key] = string(h.Value)
		}
		if hdr["source.topic"] != topics.Acks || hdr["error"] == "" || hdr["source.offset"] != fmt.Sprint(10+i) {
			t.Fatalf("dead letter %d headers %v", i, hdr)
		}
	}
}

// A poison record near the broker's size limit (1 MiB by default) is
// dead-lettered cut down, with its size in a header, instead of a copy past
// the limit that the broker refuses for good while its partition waits.
func TestAPoisonRecordNearTheSizeLimitIsDeadLetteredCut(t *testing.T) {
	k := newKafka(t, 1)
	cl := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(k.brokers()...), Timeout: 10 * time.Second}
	garbage := bytes.Repeat([]byte{0xff}, 1_048_400)
	res, err := cl.Produce(context.Background(), &kafka.ProduceRequest{
		Topic: topics.Acks, Partition: 0, RequiredAcks: kafka.RequireAll,
		Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes([]byte("g1/u1")), Value: kafka.NewBytes(garbage)}),
	})
	if err != nil || res.Error != nil {
		t.Fatalf("the broker refused the poison record: %v %v", err, res.Error)
	}
	sendAcks(t, k, 10)
	h := newMemAcks()
	r, _ := runAcks(t, k, "acks-bigpoison", h)
	waitFor(t, "the 10 good acks behind the poison", 20*time.Second, func() bool { return h.handled() == 10 })
	if n := r.Stats().DeadLettered; n != 1 {
		t.Fatalf("%d dead-lettered, want 1", n)
	}
	dl := kafka.NewReader(kafka.ReaderConfig{Brokers: k.brokers(), Topic: topics.DeadLetter, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer dl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := dl.FetchMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{}
	for _, h := range m.Headers {
		hdr[h.Key] = string(h.Value)
	}
	if hdr["truncated.from"] != fmt.Sprint(len(garbage)+len("g1/u1")) || len(m.Value) >= len(garbage) || !bytes.Equal(m.Value, garbage[:len(m.Value)]) {
		t.Fatalf("the copy: %d bytes of value, headers %v; want the start of the record and its size", len(m.Value), hdr)
	}
}

// A saved position past the end of the partition (the topic recreated, or
// a broker that lost its log's tail) does not skip the records below it:
// they are handled from the partition's start, and only then is the
// partition marked replayed.
func TestASavedPositionPastTheEndIsNotASilentSkip(t *testing.T) {
	k := newKafka(t, 1)
	h := newMemAcks()
	h.offsets[0] = 50
	sendAcks(t, k, 10)
	r, _ := runAcks(t, k, "acks-pastend", h)
	waitFor(t, "the 10 records below the saved position", 20*time.Second, func() bool { return h.handled() == 10 })
	waitFor(t, "caught up", 5*time.Second, func() bool { return r.CaughtUp() })
	if m := h.marked(); len(m[0]) != 1 {
		t.Fatalf("replay marks %v, want partition 0 marked once", m)
	}
}

func TestRunnerReplaysFromStoreWhenStateIsWiped(t *testing.T) {
	k := newKafka(t, 2)
	sendAcks(t, k, 100)
	h := newMemAcks()
	_, stop := runAcks(t, k, "acks-wipe", h)
	waitFor(t, "first pass", 20*time.Second, func() bool { return h.handled() == 100 })
	stop()
	want := h.cursors

	// Wipe the state and its offsets: the runner must replay from the start
	// even though the group has committed offsets.
	fresh := newMemAcks()
	runAcks(t, k, "acks-wipe", fresh)
	waitFor(t, "replay", 20*time.Second, func() bool { return fresh.handled() == 100 })
	fresh.mu.Lock()
	defer fresh.mu.Unlock()
	if fmt.Sprint(fresh.cursors) != fmt.Sprint(want) {
		t.Fatalf("replayed cursors %v, want %v", fresh.cursors, want)
	}
}

// A state wiped under a running runner is rebuilt by replay: at once when
// the partitions are idle (the saved position is checked), and when records
// arrive (the next save finds its position gone). Before, the runner went
// on from where it was and the wiped state stayed lost until a restart.
func TestRunnerReplaysWhenStateIsWipedWhileRunning(t *testing.T) {
	k := newKafka(t, 2)
	sendAcks(t, k, 100)
	h := newMemAcks()
	r, _ := runAcks(t, k, "acks-live-wipe", h)
	waitFor(t, "first pass", 20*time.Second, func() bool { return h.handled() == 100 })
	want := h.snapshot()

	h.wipe() // idle partitions
	waitFor(t, "replay of idle partitions", 20*time.Second, func() bool { return h.handled() == 100 })
	if got := h.snapshot(); got != want {
		t.Fatalf("rebuilt cursors %v, want %v", got, want)
	}

	h.wipe() // then records arrive at once
	sendAcks(t, k, 100)
	waitFor(t, "replay with new records", 20*time.Second, func() bool { return h.handled() == 200 })
	all := newMemAcks()
	runAcks(t, k, "acks-live-wipe-check", all)
	waitFor(t, "a fresh runner's pass", 20*time.Second, func() bool { return all.handled() == 200 })
	if got, want := h.snapshot(), all.snapshot(); got != want {
		t.Fatalf("rebuilt cursors %v, want %v", got, want)
	}
	if n := r.Stats().Replays; n < 2 {
		t.Fatalf("%d partition replays counted, want at least 2", n)
	}
}

// A partition is marked replayed once an assignment, after the batch that
// caught up with it was handled, and again after a wipe only once the
// replay has caught up: never while its state is partial.
func TestRunnerMarksAPartitionReplayedOnlyOnceWhole(t *testing.T) {
	k := newKafka(t, 2)
	sendAcks(t, k, 100)
	h := newMemAcks()
	r, _ := runAcks(t, k, "acks-marks", h)
	check := func(when string) {
		t.Helper()
		// A partition is called caught up after the batch that caught up
		// with it is handled and marked (consume), and no longer once it
		// replays: caught up with every record handled, each partition is
		// past the point where its mark, the first or a second, is written.
		waitFor(t, when, 20*time.Second, func() bool { return h.handled() == 100 && len(h.marked()) == 2 && r.CaughtUp() })
		h.mu.Lock()
		defer h.mu.Unlock()
		for part, at := range h.marks {
			if want := []int{h.handledIn(part)}; fmt.Sprint(at) != fmt.Sprint(want) {
				t.Fatalf("%s: partition %d marked replayed with %v records handled, want once with %v", when, part, at, want)
			}
		}
	}
	check("first pass")
	h.wipe()
	check("replay after a wipe")
}

func TestRunnerCaughtUpOnEmptyAndFullTopics(t *testing.T) {
	k := newKafka(t, 2)
	h := newMemAcks()
	r, _ := runAcks(t, k, "acks-caught-empty", h)
	waitFor(t, "caught up on an empty topic", 20*time.Second, r.CaughtUp)

	sendAcks(t, k, 50)
	h2 := newMemAcks()
	r2, _ := runAcks(t, k, "acks-caught-full", h2)
	waitFor(t, "caught up after replay", 20*time.Second, r2.CaughtUp)
	if n := h2.handled(); n != 50 {
		t.Fatalf("caught up after handling %d of 50 records", n)
	}
}

// A process the group gives no partition (more processes than partitions,
// a surge during a rolling update) has nothing to read: it is caught up,
// so that its readiness probe does not hold a rollout back.
func TestARunnerWithoutPartitionsIsCaughtUp(t *testing.T) {
	k := newKafka(t, 1)
	sendAcks(t, k, 20)
	h := newMemAcks()
	first, _ := runAcks(t, k, "acks-spare", h)
	waitFor(t, "the first runner caught up", 20*time.Second, first.CaughtUp)
	second, _ := runAcks(t, k, "acks-spare", h)
	waitFor(t, "both runners caught up after the rebalance", 40*time.Second, func() bool {
		return first.CaughtUp() && second.CaughtUp() && len(first.Lag())+len(second.Lag()) == 1
	})
}

// A state wiped right after a fresh partition's first batch, before its
// first save, is rebuilt: the partition claimed its start before reading,
// so the save finds that claim gone instead of mistaking the wiped store
// for one that never held anything.
func TestRunnerReplaysStateWipedBeforeTheFirstSave(t *testing.T) {
	k := newKafka(t, 1)
	sendAcks(t, k, 50)
	h := newMemAcks()
	h.wipeAfter = 1
	r, _ := runAcks(t, k, "acks-first-save", h)
	waitFor(t, "the replay after the wipe", 20*time.Second, func() bool { return h.handled() == 50 && h.savedTotal() == 50 })
	if st := r.Stats(); st.Replays < 1 {
		t.Fatalf("stats %+v: want a replay", st)
	}
	all := newMemAcks()
	runAcks(t, k, "acks-first-save-check", all)
	waitFor(t, "a fresh runner's pass", 20*time.Second, func() bool { return all.handled() == 50 })
	if got, want := h.snapshot(), all.snapshot(); got != want {
		t.Fatalf("rebuilt cursors %v, want %v", got, want)
	}
}

// slowAcks is memAcks whose Handle takes a while, like the persister
// waiting for its shared ClickHouse insert.
type slowAcks struct{ *memAcks }

func (s slowAcks) Handle(ctx context.Context, part int, recs []Record[schema.Ack]) error {
	time.Sleep(100 * time.Millisecond)
	return s.memAcks.Handle(ctx, part, recs)
}

// A trickle of records, fetched one at a time, piles up in the reader
// while a slow Handle runs; the next batch must take all of it, or the
// consumer falls behind for good at one record per Handle.
func TestRunnerHandsATrickleOverInBatchesToASlowHandler(t *testing.T) {
	k := newKafka(t, 1)
	h := newMemAcks()
	r, _ := runAcksWith(t, k, "acks-trickle", slowAcks{h}, h, nil)
	waitFor(t, "the partition assigned", 20*time.Second, func() bool { return len(r.Lag()) == 1 })
	const n = 100
	for i := range n { // 10 ms apart: 10 records per Handle of 100 ms
		if err := k.prod.SendAcks(context.Background(), schema.Ack{Gid: "g", Uid: "u", Upto: int64(i), At: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, "all acks handled", 20*time.Second, func() bool { return h.handled() == n })
	if b := r.Stats().Batches; b > n/3 {
		t.Errorf("%d records came in %d batches: the ones queued behind a slow Handle were handed over one at a time", n, b)
	}
}

// A consumer that keeps its position in Kafka only (the fan-out, the
// receipt notifier) commits an idle partition once, not once an interval
// for ever.
func TestAnIdlePartitionWithoutAnOffsetStoreIsCommittedOnce(t *testing.T) {
	k := newKafka(t, 1)
	h := newMemAcks()
	r, _ := runAcksWith(t, k, "acks-kafka-only", h, nil, func(c *Config[schema.Ack]) { c.CommitInterval = 50 * time.Millisecond })
	waitFor(t, "assignment", 10*time.Second, r.CaughtUp)
	sendAcks(t, k, 3)
	waitFor(t, "3 acks handled", 5*time.Second, func() bool { return h.handled() == 3 })
	waitFor(t, "the commit", 2*time.Second, func() bool { return r.Stats().Commits >= 1 })
	before := r.Stats().Commits
	time.Sleep(500 * time.Millisecond) // ten intervals, nothing new
	if after := r.Stats().Commits; after != before {
		t.Fatalf("an idle partition committed %d more times in ten intervals, having nothing new", after-before)
	}
}

// A negative interval or timeout is refused when the runner is made, not
// met later as a panic of the state check's ticker.
func TestRunnerRefusesNegativeDurations(t *testing.T) {
	h := newMemAcks()
	for _, tune := range []func(*Config[schema.Ack]){
		func(c *Config[schema.Ack]) { c.StateCheck = -time.Second },
		func(c *Config[schema.Ack]) { c.SessionTimeout = -time.Second },
		func(c *Config[schema.Ack]) { c.RebalanceTimeout = -time.Second },
	} {
		cfg := Config[schema.Ack]{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topic: topics.Acks,
			Decode: schema.DecodeAck, Handler: h, Offsets: h, DeadLetter: &producers.Producer{}}
		tune(&cfg)
		if _, err := NewRunner(cfg); err == nil || !strings.Contains(err.Error(), "positive durations") {
			t.Errorf("NewRunner with %+v: %v, want a refusal naming the durations", cfg, err)
		}
	}
}
