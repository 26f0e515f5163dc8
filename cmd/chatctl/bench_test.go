package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// The replay benchmarks fill a 16-partition topic in the embedded broker
// (set-up, not measured), then run chatctl rebuild or backfill on it once
// per iteration:
//
//	go test ./cmd/chatctl -run '^$' -bench 'Rebuild|Backfill' -benchtime 1x -timeout 30m
//
// CHATD_BENCH_N scales the topic (default 1,000,000 records). records/s is
// the replay alone (from the command's own line); total-s includes the
// wipe and the consistency report.

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

// fillTopic writes recs with big produce batches.
func fillTopic(b *testing.B, e *env, topic string, recs []kafka.Message) {
	b.Helper()
	w := &kafka.Writer{Transport: testserver.KafkaTransport(b), Addr: kafka.TCP(e.brokers...), Topic: topic, Balancer: topics.Balancer{},
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

// fillAcks writes n acks of 100 members in each of 10,000 groups.
func fillAcks(b *testing.B, e *env, n int) {
	rng := rand.New(rand.NewPCG(3, 4))
	recs := make([]kafka.Message, n)
	for i := range recs {
		a := schema.Ack{Gid: "g" + strconv.Itoa(rng.IntN(10000)), Uid: "u" + strconv.Itoa(rng.IntN(100)),
			Upto: rng.Int64N(1 << 30), At: 1767225600000 + int64(i)}
		recs[i] = kafka.Message{Key: schema.MemberKey(a.Gid, a.Uid), Value: schema.AppendAck(nil, &a)}
	}
	fillTopic(b, e, topics.Acks, recs)
}

// fillMessages writes n messages with 200-byte bodies to 1,000 groups.
func fillMessages(b *testing.B, e *env, n int) {
	rng := rand.New(rand.NewPCG(1, 2))
	body := make([]byte, 200)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	now := time.Now().UnixMilli()
	recs := make([]kafka.Message, n)
	for i := range recs {
		m := schema.Message{Gid: "g" + strconv.Itoa(rng.IntN(1000)), Sender: "u" + strconv.Itoa(rng.IntN(100)),
			ClientMsgID: "c" + strconv.Itoa(i), SentAt: now + int64(i)/1000, Body: body}
		recs[i] = kafka.Message{Key: schema.MessageKey(m.Gid), Value: schema.AppendMessage(nil, &m)}
	}
	fillTopic(b, e, topics.Messages, recs)
}

var rateLine = regexp.MustCompile(`\(([0-9]+) records/s\)`)

// timeCtl runs chatctl once and reports its own replay rate, the total,
// and the CPU spent per record by this process (chatctl and the embedded
// broker) and by redis-server.
func timeCtl(b *testing.B, e *env, n int, args ...string) {
	b.Helper()
	start, self0, redis0, ch0 := time.Now(), testserver.SelfCPU(), redisCPU(b, e), testserver.ChildCPU("clickhouse")
	out := e.mustCtl(args...)
	took := time.Since(start)
	b.ReportMetric(float64((testserver.ChildCPU("clickhouse")-ch0).Nanoseconds())/float64(n), "ch-ns/record")
	b.ReportMetric(float64((testserver.SelfCPU()-self0).Nanoseconds())/float64(n), "go-ns/record")
	b.ReportMetric(float64((redisCPU(b, e)-redis0).Nanoseconds())/float64(n), "redis-ns/record")
	m := rateLine.FindStringSubmatch(out)
	if m == nil {
		b.Fatalf("no rate in the output of chatctl %v:\n%s", args, out)
	}
	rate, _ := strconv.ParseFloat(m[1], 64)
	b.ReportMetric(rate, "records/s")
	b.ReportMetric(took.Seconds(), "total-s")
}

func BenchmarkRebuildAcks(b *testing.B) {
	n := benchN(b)
	e := newEnvTB(b, 16)
	fillAcks(b, e, n)
	for _, par := range []string{"4", "8"} {
		b.Run("parallel="+par, func(b *testing.B) {
			for range b.N {
				timeCtl(b, e, n, "rebuild", "acks", "-parallel", par)
			}
		})
	}
}

func BenchmarkBackfill(b *testing.B) {
	n := benchN(b)
	e := newEnvTB(b, 16)
	fillAcks(b, e, n)
	fillMessages(b, e, n)
	for _, table := range []string{"acks", "messages"} {
		b.Run(table, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				e.withClickHouse(fmt.Sprint("bench_", table))
				b.StartTimer()
				timeCtl(b, e, n, "backfill", "-tables", table)
			}
		})
	}
}

// redisCPU returns redis-server's user+sys CPU time so far (INFO cpu).
func redisCPU(b *testing.B, e *env) time.Duration {
	d, err := testserver.RedisCPU(context.Background(), e.rc)
	if err != nil {
		b.Fatal(err)
	}
	return d
}
