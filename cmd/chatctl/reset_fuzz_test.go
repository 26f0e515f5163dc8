package main

import (
	"context"
	"maps"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/topics"
)

// FuzzResetTarget feeds chatctl consumer-groups reset any -to, against a
// topic on the embedded broker whose records have known times: partition
// 0 none, 1 four an hour apart, 2 three out of time order. checkTarget
// takes earliest, latest, an RFC 3339 time and a decimal offset of 0 or
// more, and only those, before Kafka is asked anything; resetTarget turns
// exactly what it takes into an offset for every partition, within the
// log: its start, its end, the first record at or after the time (the end
// when none is), or the offset held to the log.
func FuzzResetTarget(f *testing.F) {
	b := testserver.NewBroker(f)
	const topic = "chat.reset-fuzz"
	client := &kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: testserver.KafkaTransport(f), Timeout: 10 * time.Second}
	ctx := context.Background()
	if _, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 3, ReplicationFactor: 1}}}); err != nil {
		f.Fatal(err)
	}
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	times := map[int][]time.Time{
		1: {t0, t0.Add(time.Hour), t0.Add(2 * time.Hour), t0.Add(3 * time.Hour)},
		2: {t0.Add(5 * time.Hour), t0.Add(time.Hour), t0.Add(3 * time.Hour)},
	}
	for p, ts := range times {
		recs := make([]kafka.Record, len(ts))
		for i, at := range ts {
			recs[i] = kafka.Record{Time: at, Value: kafka.NewBytes([]byte("r"))}
		}
		resp, err := client.Produce(ctx, &kafka.ProduceRequest{Topic: topic, Partition: p, RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(recs...)})
		if err != nil || resp.Error != nil {
			f.Fatalf("produce to %s/%d: %v, %v", topic, p, err, resp)
		}
	}
	a := newAdmin([]string{b.Addr()}, topics.Security{})
	f.Cleanup(a.close)
	parts := []int{0, 1, 2}

	for _, to := range []string{
		"earliest", "latest", "0", "2", "3", "4", "99", "9223372036854775807", "-1", "+2", "02", "1e3", "", "Earliest", " latest",
		"2024-05-01T12:00:00Z", "2024-05-01T13:30:00Z", "2024-05-01T14:00:00.000000001Z", "2024-05-01T15:00:00+01:00",
		"2024-05-01T17:00:00Z", "2030-01-01T00:00:00Z", "2024-05-01 12:00:00Z", "2024-05-01", "1970-01-01T00:00:00Z",
		// Before 1970, Kafka took -1 ms for the log end, -3 for the record
		// of the latest time, and refused the others; past 2262, kafka-go's
		// nanoseconds overflowed.
		"1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.997Z", "1900-01-01T00:00:00Z",
		"2262-04-11T23:47:16.854775807Z", "2262-04-11T23:47:16.854775808Z", "2900-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z",
	} {
		f.Add(to)
	}
	f.Fuzz(func(t *testing.T, to string) {
		checked := checkTarget(to)
		target, err := resetTarget(ctx, a, topic, parts, to)
		at, terr := time.Parse(time.RFC3339Nano, to)
		off, isOff := new(big.Int).SetString(to, 10)
		isOff = isOff && off.IsInt64() && off.Sign() >= 0
		takes := to == "earliest" || to == "latest" || terr == nil || isOff
		if (checked == nil) != takes {
			t.Fatalf("checkTarget(%q) = %v", to, checked)
		}
		if !takes {
			if err == nil || !strings.Contains(err.Error(), "-to") {
				t.Fatalf("resetTarget(%q) = %v, %v; want the refusal checkTarget gives", to, target, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("resetTarget(%q): %v", to, err)
		}
		if !slices.Equal(slices.Sorted(maps.Keys(target)), parts) {
			t.Fatalf("resetTarget(%q) = %v; want an offset for each of %v", to, target, parts)
		}
		for _, p := range parts {
			end := int64(len(times[p]))
			want := end
			switch {
			case to == "earliest":
				want = 0
			case to == "latest":
			case terr == nil:
				// Kafka keeps record times in milliseconds.
				for i, rt := range times[p] {
					if rt.UnixMilli() >= at.UnixMilli() {
						want = int64(i)
						break
					}
				}
			default:
				want = min(off.Int64(), end)
			}
			if target[p] != want {
				t.Fatalf("resetTarget(%q) = %v; want %d in partition %d (records at %v)", to, target, want, p, times[p])
			}
		}
	})
}
