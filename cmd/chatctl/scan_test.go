package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// Retention moves a partition's log start after the scan listed it (a long
// backfill reads partitions a few at a time): the scan goes on from the new
// start and says what it skipped, rather than failing, which would make
// every rerun fail the same way.
func TestScanGoesOnWhenRetentionMovesTheLogStart(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	for i := range 20 {
		if _, err := e.prod.SendMessage(ctx, &schema.Message{Gid: "g", Sender: "u", SentAt: time.Now().UnixMilli(), Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	spans, total, err := newAdmin(e.brokers, topics.Security{}).spans(ctx, topics.Messages, nil)
	if err != nil {
		t.Fatal(err)
	}
	testserver.DeleteRecordsBefore(t, e.brokers, topics.Messages, 0, 5)
	var got []int64
	var skipped [][2]int64
	var offsets int64
	err = scan(ctx, scanConfig{brokers: e.brokers, topic: topics.Messages,
		onSkip:    func(_ int, from, to int64) { skipped = append(skipped, [2]int64{from, to}) },
		onRecords: func(_ int, n int64) { offsets += n }}, spans,
		func(_ context.Context, _ int, msgs []kafka.Message) error {
			for _, m := range msgs {
				got = append(got, m.Offset)
			}
			return nil
		})
	if err != nil || len(got) != 15 || got[0] != 5 {
		t.Fatalf("scan after retention moved the log start from 0 to 5: err %v, read %v; want the 15 from 5 on", err, got)
	}
	if fmt.Sprint(skipped) != "[[0 5]]" || offsets != total {
		t.Fatalf("skipped %v, progress %d of %d offsets; want [[0 5]] and all of them", skipped, offsets, total)
	}
}

// A write that takes longer than a fetch's deadline (a ClickHouse slowing
// its inserts down) must not fail the scan: fn runs between fetches.
func TestScanOutlastsASlowWrite(t *testing.T) {
	defer func(d time.Duration) { fetchDeadline = d }(fetchDeadline)
	fetchDeadline = time.Second
	e := newEnv(t, 1)
	ctx := context.Background()
	acks := make([]schema.Ack, 5000)
	for i := range acks {
		acks[i] = schema.Ack{Gid: "g", Uid: fmt.Sprintf("user-with-a-longish-name-%d", i), Upto: int64(i), At: time.Now().UnixMilli()}
	}
	if err := e.prod.SendAcks(ctx, acks...); err != nil {
		t.Fatal(err)
	}
	spans, total, err := newAdmin(e.brokers, topics.Security{}).spans(ctx, topics.Acks, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen int64
	calls := 0
	err = scan(ctx, scanConfig{brokers: e.brokers, topic: topics.Acks, batch: 1000, parallel: 1}, spans,
		func(_ context.Context, _ int, msgs []kafka.Message) error {
			if calls++; calls == 1 {
				time.Sleep(1500 * time.Millisecond) // one write slower than a fetch may take
			}
			seen += int64(len(msgs))
			return nil
		})
	if err != nil || seen != total {
		t.Fatalf("scan with one write past the fetch deadline: err %v, %d of %d records handed on", err, seen, total)
	}
}

// Progress counts offsets, so a rebuild of a compacted topic ends at 100%.
func TestProgressOfACompactedTopicEndsAtAHundredPercent(t *testing.T) {
	defer func(d time.Duration) { plainEvery = d }(plainEvery)
	e := newEnv(t, 1)
	ctx := context.Background()
	if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: "alice", Upto: 1, At: 1}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: "bob", Upto: int64(i), At: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: "carol", Upto: 1, At: 1}); err != nil {
		t.Fatal(err)
	}
	e.broker.Cluster().Compact()
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"rebuild", "acks"}, func(k string) string { return e.vars[k] }, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "102/102 offsets (100.0%), 3 records") {
		t.Fatalf("the progress of a finished rebuild of 3 records left of 102:\n%s", errOut.String())
	}
	if !strings.Contains(out.String(), "replayed 3 records") {
		t.Fatalf("the summary:\n%s", out.String())
	}
}
