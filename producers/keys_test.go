package producers

import (
	"context"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// sendBatches sends n batches of chat.messages' only partition, each of
// three records of a and two of b, one request each, and returns the
// msgids of each batch and the group of each msgid.
func sendBatches(t *testing.T, p *Producer, n int) ([][]int64, map[int64]string) {
	t.Helper()
	var batches [][]int64
	gidOf := map[int64]string{}
	for i := range n {
		ms := make([]schema.Message, 5)
		for j := range ms {
			ms[j] = schema.Message{Gid: []string{"a", "b"}[j%2], Sender: "u1", ClientMsgID: fmt.Sprint(i, "-", j), Body: []byte("x")}
		}
		ids, err := p.SendMessages(context.Background(), ms)
		if err != nil {
			t.Fatal(err)
		}
		for j, id := range ids {
			gidOf[id] = ms[j].Gid
		}
		batches = append(batches, ids)
	}
	return batches, gidOf
}

// IsMessageOf keeps the keys of several batches of a partition: the asks
// of the members of groups whose messages share the partition's newest
// batches, coming in turns, fetch each batch once. What it keeps is
// bounded, and the newest batches are what it keeps.
func TestIsMessageOfKeepsTheKeysOfSeveralBatches(t *testing.T) {
	b, p := setup(t, 1)
	ctx := context.Background()
	batches, gidOf := sendBatches(t, p, keyBatches+4)
	fetches := testserver.CountRequests(b, kmsg.Fetch, testserver.OneRecordFetch)
	ask := func(ids []int64) {
		t.Helper()
		for _, id := range ids {
			for _, g := range []string{"a", "b"} {
				if ok, err := p.IsMessageOf(ctx, g, id); err != nil || ok != (g == gidOf[id]) {
					t.Fatalf("IsMessageOf(%s, %d) = %v, %v; the record is %s's", g, id, ok, err, gidOf[id])
				}
			}
		}
	}
	for range 2 {
		for _, ids := range batches {
			ask(ids)
		}
	}
	// The second round fetched again only the oldest batches, which the
	// newest keyBatches pushed out.
	if got, want := fetches.Load(), int64(len(batches)+4); got != want {
		t.Errorf("two rounds of asks over %d batches made %d one-record fetches, want %d", len(batches), got, want)
	}
	before := fetches.Load()
	for _, ids := range batches[4:] {
		ask(ids)
	}
	if n := fetches.Load() - before; n != 0 {
		t.Errorf("asks over the newest %d batches made %d fetches, want none", keyBatches, n)
	}
}

// A record retention deleted (below the log's start) is no message a
// member can have: IsMessageOf says so, rather than fail (the gateway
// would answer every ack up to it with unavailable, which clients retry),
// and it remembers the start, so that asks below it cost the broker
// nothing.
func TestARecordRetentionDeletedIsNoMessage(t *testing.T) {
	b, p := setup(t, 1)
	ctx := context.Background()
	batches, gidOf := sendBatches(t, p, 10)
	start := batches[5][0]
	testserver.DeleteRecordsBefore(t, []string{b.Addr()}, topics.Messages, 0, start)
	fetches := testserver.CountRequests(b, kmsg.Fetch, testserver.OneRecordFetch)
	lists := testserver.CountRequests(b, kmsg.ListOffsets, nil)
	for _, ids := range batches[:5] {
		for _, id := range ids {
			if ok, err := p.IsMessageOf(ctx, gidOf[id], id); err != nil || ok {
				t.Fatalf("IsMessageOf(%s, %d) below the log's start %d = %v, %v; want false, nil", gidOf[id], id, start, ok, err)
			}
		}
	}
	if f, l := fetches.Load(), lists.Load(); f > 1 || l > 2 {
		t.Errorf("25 asks below the log's start made %d one-record fetches and %d ListOffsets; want 1 and 2 at most", f, l)
	}
	if ok, err := p.IsMessageOf(ctx, gidOf[start], start); err != nil || !ok {
		t.Errorf("IsMessageOf(%s, %d) at the log's start = %v, %v; want true", gidOf[start], start, ok, err)
	}
}
