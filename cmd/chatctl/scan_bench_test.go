package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// BenchmarkScan is the ceiling the broker and the client leave a replay:
// chat.acks read and decoded, nothing written.
func BenchmarkScan(b *testing.B) {
	n := benchN(b)
	e := newEnvTB(b, 16)
	fillAcks(b, e, n)
	a := newAdmin(e.brokers, topics.Security{})
	for _, par := range []int{4, 8} {
		for _, batch := range []int{10000, 50000} {
			b.Run(fmt.Sprintf("parallel=%d/batch=%d", par, batch), func(b *testing.B) {
				for range b.N {
					spans, total, _ := a.spans(context.Background(), topics.Acks, nil)
					start := time.Now()
					var c counter
					err := scan(context.Background(), scanConfig{brokers: e.brokers, topic: topics.Acks, batch: batch, parallel: par}, spans, func(_ context.Context, _ int, msgs []kafka.Message) error {
						for i := range msgs {
							schema.DecodeAck(msgs[i].Value)
						}
						c.Add(int64(len(msgs)))
						return nil
					})
					if err != nil || c.Load() != total {
						b.Fatal(err, c.Load(), total)
					}
					b.ReportMetric(float64(total)/time.Since(start).Seconds(), "records/s")
				}
			})
		}
	}
}
