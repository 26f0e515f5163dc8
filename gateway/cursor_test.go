package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
)

// messagesLists counts the ListOffsets requests for chat.messages that
// the broker gets from now on.
func (e *env) messagesLists() *atomic.Int64 {
	return testserver.CountRequests(e.broker, kmsg.ListOffsets, func(req kmsg.Request) bool {
		for _, t := range req.(*kmsg.ListOffsetsRequest).Topics {
			if t.Topic == topics.Messages {
				return true
			}
		}
		return false
	})
}

// A cursor above the group's head in Redis, up to a msgid the persister
// has stored, is no message of the group (the persister saves its
// position after the heads): it is refused without a question to the
// broker, whose answer a member could otherwise have the gateway fetch,
// a batch of up to a megabyte, with every frame.
func TestACursorThePersisterPassedAsksNoBroker(t *testing.T) {
	e := newEnv(t, envOpts{})
	other := samePartition(t, "g1")
	e.group("g1", "alice")
	e.group(other, "bob")
	alice, bob := e.login(0, "alice"), e.login(0, "bob")
	sendHi(t, alice, "g1", "a1")
	var ids []int64
	for i := range 5 { // a batch each
		ids = append(ids, sendHi(t, bob, other, fmt.Sprint("b", i)))
	}
	waitFor(t, "the persister's position past them", 10*time.Second, func() bool {
		stored, _ := e.redis.Offsets(context.Background(), consumers.GroupPersister, topics.Messages)
		return stored[topics.Partition(other, 4)] > ids[len(ids)-1]
	})
	fetches := testserver.CountRequests(e.broker, kmsg.Fetch, testserver.OneRecordFetch)
	lists := e.messagesLists()
	for _, id := range ids {
		for _, op := range []string{"ack", "read"} {
			if f := alice.call(map[string]any{"op": op, "gid": "g1", "upto": id}); code(f) != string(protocol.CodeBeyondHead) {
				t.Errorf("%s of g1 upto %d, which the persister stored as %s's: %v, want beyond_head", op, id, other, f)
			}
		}
	}
	if f, l := fetches.Load(), lists.Load(); f+l != 0 {
		t.Errorf("10 cursors up to msgids the persister has passed made %d one-record fetches and %d ListOffsets; want none", f, l)
	}
}

// An ack up to a record retention deleted, which the persister has not
// stored (it lags), is no message of the group: refused as beyond_head,
// not unavailable (which clients retry), and at the cost of a look at the
// log's bounds, not of a fetch, a ListOffsets and a Warn line every frame.
func TestAnAckOfARecordRetentionDeletedIsBeyondHead(t *testing.T) {
	var logs testserver.LogBuffer
	e := newEnv(t, envOpts{tune: func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }})
	other := samePartition(t, "g1")
	e.group("g1", "alice")
	e.group(other, "bob")
	alice, bob := e.login(0, "alice"), e.login(0, "bob")
	head := sendHi(t, alice, "g1", "a1")
	waitFor(t, "persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "g1"); return h == head })
	e.parts["persister"].stop()
	var ids []int64
	for i := range 5 {
		ids = append(ids, sendHi(t, bob, other, fmt.Sprint("b", i)))
	}
	testserver.DeleteRecordsBefore(t, []string{e.broker.Addr()}, topics.Messages, int32(topics.Partition(other, 4)), ids[4]+1)
	fetches := testserver.CountRequests(e.broker, kmsg.Fetch, testserver.OneRecordFetch)
	lists := e.messagesLists()
	warns := strings.Count(logs.String(), "level=WARN")
	const n = 50
	codes := map[string]int{}
	for i := range n {
		codes[code(alice.call(map[string]any{"op": "ack", "gid": "g1", "upto": ids[i%len(ids)]}))]++
	}
	if codes[string(protocol.CodeBeyondHead)] != n {
		t.Errorf("%d acks of g1 up to %s's msgids retention deleted: %v, want all beyond_head", n, other, codes)
	}
	if f, l, w := fetches.Load(), lists.Load(), strings.Count(logs.String(), "level=WARN")-warns; f > 1 || l > 2 || w > 0 {
		t.Errorf("%d acks up to deleted records made %d one-record fetches, %d ListOffsets and %d Warn lines; want 1, 2 and none at most", n, f, l, w)
	}
}
