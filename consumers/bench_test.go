package consumers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// The backlog benchmarks replay a topic that is already full, the way a
// wiped store is rebuilt, and report records/s from the first handled batch
// to the last commit (join_ms is the consumer-group join before it). Run
// them one iteration at a time:
//
//	go test ./consumers -run '^$' -bench 'PersisterBacklog|AckRebuild' -benchtime=1x
//
// CHATD_BENCH_N scales the backlog (default 1,000,000) for quick runs.

const (
	benchPartitions = 16
	benchGroups     = 1000 // groups in the message backlog
	benchBodyLen    = 200
	benchWindow     = 1000
	benchAckGroups  = 10000
	benchAckMembers = 100
)

func benchN(b *testing.B) int {
	if s := os.Getenv("CHATD_BENCH_N"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("CHATD_BENCH_N=%q: want a positive integer", s)
		}
		return n
	}
	return 1_000_000
}

// benchEnv is kfake in process with a filled topic, a real redis-server and
// the shared clickhouse-server.
type benchEnv struct {
	*kafkaEnv
	rc    redis.UniversalClient
	redis *store.Redis
	chSrv *testserver.ClickHouse
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	e := &benchEnv{kafkaEnv: newKafka(b, benchPartitions)}
	srv := testserver.NewRedis(b)
	e.rc = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	b.Cleanup(func() { e.rc.Close() })
	var err error
	if e.redis, err = store.NewRedis(e.rc, store.RedisConfig{WindowSize: benchWindow}); err != nil {
		b.Fatal(err)
	}
	e.chSrv = testserver.SharedClickHouse(b)
	return e
}

// freshClickHouse opens a store on an empty database of its own.
func (e *benchEnv) freshClickHouse(b *testing.B) *store.ClickHouse {
	b.Helper()
	db := fmt.Sprintf("bench%d_%d", time.Now().UnixNano()%1e6, dbSeq.Add(1))
	ch, err := store.OpenClickHouse(context.Background(), store.ClickHouseConfig{Addrs: []string{e.chSrv.Addr}, Database: db})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ch.Close() })
	return ch
}

// fill writes recs to topic with big produce batches; it is set-up, not
// measured.
func (e *benchEnv) fill(b *testing.B, topic string, recs []kafka.Message) {
	b.Helper()
	w := &kafka.Writer{Transport: testserver.KafkaTransport(b), Addr: kafka.TCP(e.brokers()...), Topic: topic, Balancer: topics.Balancer{},
		BatchSize: 20000, BatchBytes: 900_000, BatchTimeout: 5 * time.Millisecond, RequiredAcks: kafka.RequireOne}
	defer w.Close()
	for len(recs) > 0 {
		n := min(len(recs), 200_000)
		if err := w.WriteMessages(context.Background(), recs[:n]...); err != nil {
			b.Fatal(err)
		}
		recs = recs[n:]
	}
}

// fillMessages writes n messages with distinct client_msg_ids, each to a
// random one of benchGroups groups, and returns the message count per group.
func (e *benchEnv) fillMessages(b *testing.B, n int) map[string]int {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	body := make([]byte, benchBodyLen)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	per := map[string]int{}
	recs := make([]kafka.Message, n)
	now := time.Now().UnixMilli()
	for i := range recs {
		m := schema.Message{Gid: "g" + strconv.Itoa(rng.IntN(benchGroups)), Sender: "u" + strconv.Itoa(rng.IntN(100)),
			ClientMsgID: "c" + strconv.Itoa(i), SentAt: now + int64(i)/1000, Body: body}
		per[m.Gid]++
		recs[i] = kafka.Message{Key: schema.MessageKey(m.Gid), Value: schema.AppendMessage(nil, &m)}
	}
	e.fill(b, topics.Messages, recs)
	return per
}

// fillAcks writes n acks of random members of benchAckGroups groups with
// random uptos and returns the cursor each member must end with.
func (e *benchEnv) fillAcks(b *testing.B, n int) map[[2]string]int64 {
	b.Helper()
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[[2]string]int64{}
	recs := make([]kafka.Message, n)
	for i := range recs {
		a := schema.Ack{Gid: "g" + strconv.Itoa(rng.IntN(benchAckGroups)), Uid: "u" + strconv.Itoa(rng.IntN(benchAckMembers)),
			Upto: rng.Int64N(1 << 30), At: 1767225600000 + int64(i)}
		k := [2]string{a.Gid, a.Uid}
		if cur, ok := want[k]; !ok || a.Upto > cur {
			want[k] = a.Upto
		}
		recs[i] = kafka.Message{Key: schema.MemberKey(a.Gid, a.Uid), Value: schema.AppendAck(nil, &a)}
	}
	e.fill(b, topics.Acks, recs)
	return want
}

// discard is the handler of the "kafka" variants: the ceiling that the
// runner, kafka-go and kfake leave for the stores.
type discard[E any] struct{}

func (discard[E]) Handle(context.Context, int, []Record[E]) error { return nil }

// timedHandler notes when the first batch arrives.
type timedHandler[E any] struct {
	Handler[E]
	once  sync.Once
	first atomic.Int64 // unix ns
}

func (h *timedHandler[E]) Handle(ctx context.Context, part int, recs []Record[E]) error {
	h.once.Do(func() { h.first.Store(time.Now().UnixNano()) })
	return h.Handler.Handle(ctx, part, recs)
}

// timedFlusher is a timedHandler of a Flusher, still a Flusher to the
// runner.
type timedFlusher[E any] struct {
	*timedHandler[E]
	Flusher
}

func (h timedFlusher[E]) Handle(ctx context.Context, part int, recs []Record[E]) error {
	return h.timedHandler.Handle(ctx, part, recs)
}

// drain runs cfg's runner until it has handled n records and, for a
// Flusher, flushed what it holds, and reports the rate from the first
// batch on, and the join time before it.
func drain[E any](b *testing.B, e *benchEnv, cfg Config[E], n int, unit string) {
	b.Helper()
	cpu0, ch0, self0 := e.redisCPU(b), testserver.ChildCPU("clickhouse"), testserver.SelfCPU()
	th := &timedHandler[E]{Handler: cfg.Handler}
	flusher, _ := cfg.Handler.(Flusher)
	cfg.Handler = th
	if flusher != nil {
		cfg.Handler = timedFlusher[E]{th, flusher}
	}
	r, err := NewRunner(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	b.StartTimer()
	go func() { done <- r.Run(ctx) }()
	deadline := start.Add(5 * time.Minute)
	for r.Stats().Records < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("handled %d of %d records in 5m", r.Stats().Records, n)
		}
		time.Sleep(time.Millisecond)
	}
	if flusher != nil { // the rows still buffered count: the rate is of durable effects
		if err := flusher.Flush(context.Background(), true); err != nil {
			b.Fatal(err)
		}
	}
	end := time.Now()
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	st := r.Stats()
	if st.DeadLettered > 0 {
		b.Fatalf("stats %+v: nothing in the backlog is poison", st)
	}
	b.ReportMetric(float64(st.Retries), "retries") // a failed Handle (a store timeout under load)
	first := time.Unix(0, th.first.Load())
	b.ReportMetric(float64(n)/end.Sub(first).Seconds(), unit+"/s")
	b.ReportMetric(float64(first.Sub(start).Milliseconds()), "join_ms")
	b.ReportMetric(float64(r.Stats().Batches), "batches")
	b.ReportMetric(float64((e.redisCPU(b)-cpu0).Nanoseconds())/float64(n), "redis-ns/"+unit)
	b.ReportMetric(float64((testserver.ChildCPU("clickhouse")-ch0).Nanoseconds())/float64(n), "ch-ns/"+unit)
	b.ReportMetric(float64((testserver.SelfCPU()-self0).Nanoseconds())/float64(n), "go-ns/"+unit)
}

func (e *benchEnv) redisCPU(b *testing.B) time.Duration {
	b.Helper()
	d, err := testserver.RedisCPU(context.Background(), e.rc)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func BenchmarkPersisterBacklog(b *testing.B) {
	n := benchN(b)
	e := newBenchEnv(b)
	per := e.fillMessages(b, n)
	b.Run("kafka", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			base := Base{Brokers: e.brokers(), DeadLetter: e.prod}
			drain(b, e, runnerConfig(base, fmt.Sprint("bench.discard.", time.Now().UnixNano()), topics.Messages, schema.DecodeMessage, Handler[schema.Message](discard[schema.Message]{}), nil), n, "msgs")
		}
	})
	for _, withCH := range []bool{true, false} {
		name := "redis+clickhouse"
		if !withCH {
			name = "redis"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				if err := e.rc.FlushAll(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				p := &Persister{Redis: e.redis}
				if withCH {
					p.ClickHouse = e.freshClickHouse(b)
				}
				base := Base{Brokers: e.brokers(), DeadLetter: e.prod}
				drain(b, e, runnerConfig(base, GroupPersister, topics.Messages, schema.DecodeMessage, Handler[schema.Message](p), p.Redis), n, "msgs")
				checkPersisted(b, e, p.ClickHouse, per, n)
			}
		})
	}
}

// checkPersisted spot-checks the result: every group's head and window, and
// the ClickHouse row count.
func checkPersisted(b *testing.B, e *benchEnv, ch *store.ClickHouse, per map[string]int, n int) {
	b.Helper()
	ctx := context.Background()
	for g := 0; g < benchGroups; g += 97 {
		gid := "g" + strconv.Itoa(g)
		wr, err := e.redis.Window(ctx, gid, -1, 2*benchWindow, 0)
		if err != nil {
			b.Fatal(err)
		}
		msgs, complete := wr.Messages, wr.Floor == -1
		want := min(per[gid], benchWindow)
		if len(msgs) != want || complete != (per[gid] <= benchWindow) {
			b.Fatalf("%s: window holds %d (complete %v), want %d of %d", gid, len(msgs), complete, want, per[gid])
		}
		h, err := e.redis.Head(ctx, gid)
		if err != nil || h != msgs[len(msgs)-1].MsgID {
			b.Fatalf("%s: head %d (err %v), want %d", gid, h, err, msgs[len(msgs)-1].MsgID)
		}
	}
	if ch == nil {
		return
	}
	rows, err := ch.Query(ctx, "SELECT count() FROM messages")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var got uint64
	for rows.Next() {
		if err := rows.Scan(&got); err != nil {
			b.Fatal(err)
		}
	}
	if got < uint64(n) {
		b.Fatalf("ClickHouse holds %d rows, want %d", got, n)
	}
}

func BenchmarkAckRebuild(b *testing.B) {
	n := benchN(b)
	e := newBenchEnv(b)
	want := e.fillAcks(b, n)
	b.Run("kafka", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			base := Base{Brokers: e.brokers(), DeadLetter: e.prod}
			drain(b, e, runnerConfig(base, fmt.Sprint("bench.discard.", time.Now().UnixNano()), topics.Acks, schema.DecodeAck, Handler[schema.Ack](discard[schema.Ack]{}), nil), n, "events")
		}
	})
	for _, withCH := range []bool{false, true} {
		name := "redis"
		if withCH {
			name = "redis+clickhouse"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				if err := e.rc.FlushAll(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				a := &AckProjector{Redis: e.redis}
				if withCH {
					a.ClickHouse = e.freshClickHouse(b)
				}
				base := Base{Brokers: e.brokers(), DeadLetter: e.prod}
				drain(b, e, runnerConfig(base, GroupAckProjector, topics.Acks, schema.DecodeAck, Handler[schema.Ack](a), a.Redis), n, "events")
				checkCursors(b, e, a.ClickHouse, want)
			}
		})
	}
}

func checkCursors(b *testing.B, e *benchEnv, ch *store.ClickHouse, want map[[2]string]int64) {
	b.Helper()
	ctx := context.Background()
	for g := 0; g < benchAckGroups; g += 997 {
		gid := "g" + strconv.Itoa(g)
		got, err := e.redis.AckCursors(ctx, gid)
		if err != nil {
			b.Fatal(err)
		}
		var chGot map[string]int64
		if ch != nil {
			if chGot, err = ch.AckCursors(ctx, gid); err != nil {
				b.Fatal(err)
			}
		}
		for u := 0; u < benchAckMembers; u++ {
			uid := "u" + strconv.Itoa(u)
			w, ok := want[[2]string{gid, uid}]
			if c, has := got[uid]; has != ok || c != w {
				b.Fatalf("%s/%s: redis cursor %d (%v), want %d (%v)", gid, uid, c, has, w, ok)
			}
			if c, has := chGot[uid]; ch != nil && (has != ok || c != w) {
				b.Fatalf("%s/%s: clickhouse cursor %d (%v), want %d (%v)", gid, uid, c, has, w, ok)
			}
		}
	}
}
