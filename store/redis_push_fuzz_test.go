package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
)

func samplePushBatches() []PushBatch {
	many := PushBatch{}
	for i := range 40 {
		it := PushItem{Msg: fmt.Appendf(nil, `{"gid":"g1","msgid":%d,"body":%q}`, i, strings.Repeat("é", i*i))}
		for j := range i % 7 {
			it.Uids = append(it.Uids, fmt.Sprint("user-", j))
		}
		many.Items = append(many.Items, it)
	}
	return []PushBatch{
		{},
		{Items: []PushItem{{Msg: []byte(`{}`)}}},
		{Items: []PushItem{
			{Msg: []byte(`{"gid":"g1","msgid":7,"prev":5,"sender":"alice","sent_at":1,"body":"hi"}`), Uids: []string{"alice", "bob"}},
			{Msg: []byte(`{"gid":"g2","msgid":8,"sender":"bob","sent_at":2,"body":"\u003c/script\u003e"}`), Uids: []string{strings.Repeat("u", 128)}},
		}},
		many,
	}
}

// equalBatch compares batches, taking nil and empty slices as equal.
func equalBatch(a, b PushBatch) bool {
	if len(a.Items) != len(b.Items) {
		return false
	}
	for i := range a.Items {
		x, y := a.Items[i], b.Items[i]
		if !bytes.Equal(x.Msg, y.Msg) || len(x.Uids) != len(y.Uids) || len(x.Uids) > 0 && !reflect.DeepEqual(x.Uids, y.Uids) {
			return false
		}
	}
	return true
}

func FuzzDecodePushBatch(f *testing.F) {
	for _, b := range samplePushBatches() {
		f.Add(EncodePushBatch(b))
	}
	f.Add([]byte{})
	f.Add([]byte{2, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{1, 1, 2, '{', '}', 1, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodePushBatch(p)
		if err != nil {
			if !errors.Is(err, ErrBadPush) || !strings.HasPrefix(err.Error(), "store: ") {
				t.Fatalf("error %v does not wrap ErrBadPush", err)
			}
			return
		}
		again := EncodePushBatch(b)
		if !bytes.Equal(again, p) {
			t.Fatalf("decode then encode changed the bytes:\n in %x\nout %x", p, again)
		}
		b2, err := DecodePushBatch(again)
		if err != nil || !equalBatch(b, b2) {
			t.Fatalf("round trip: %+v, %v; want %+v", b2, err, b)
		}
	})
}

func TestPushBatchRoundTrip(t *testing.T) {
	for i, b := range samplePushBatches() {
		p := EncodePushBatch(b)
		got, err := DecodePushBatch(p)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !equalBatch(got, b) {
			t.Fatalf("batch %d: decoded %+v, want %+v", i, got, b)
		}
		if cap(p) != len(p) {
			t.Errorf("batch %d: encoder sized %d bytes for %d", i, cap(p), len(p))
		}
	}
}

func TestDecodePushBatchRejects(t *testing.T) {
	good := EncodePushBatch(PushBatch{Items: []PushItem{{Msg: []byte(`{"a":1}`), Uids: []string{"u1"}}}})
	for _, tc := range []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"unknown version", append([]byte{9}, good[1:]...)},
		{"truncated", good[:len(good)-1]},
		{"trailing byte", append(bytes.Clone(good), 0)},
		{"overlong uvarint", []byte{1, 0x80, 0x00}},
		{"uvarint overflow", []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		{"item count past the bytes", []byte{1, 0xff, 0xff, 0x03, 2, '{', '}', 0}},
		{"uid count past the bytes", []byte{1, 1, 2, '{', '}', 0xff, 0x7f, 1, 'u'}},
		{"message not JSON", []byte{1, 1, 2, '{', '{', 0}},
		{"message not an object", []byte{1, 1, 2, '[', ']', 0}},
		{"message too short", []byte{1, 1, 0, 0}},
		{"empty uid", []byte{1, 1, 2, '{', '}', 1, 0}},
		{"uid too long", append([]byte{1, 1, 2, '{', '}', 1, 129, 1}, bytes.Repeat([]byte{'u'}, 129)...)},
	} {
		if _, err := DecodePushBatch(tc.p); !errors.Is(err, ErrBadPush) {
			t.Errorf("%s: err = %v, want ErrBadPush", tc.name, err)
		}
	}
}

func recvBatch(t *testing.T, ch <-chan PushBatch, what string) PushBatch {
	t.Helper()
	select {
	case b, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return b
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing received", what)
	}
	return PushBatch{}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testPushRoute publishes to two subscribed nodes and one with no
// subscriber, and garbage that the subscriber must drop and count.
func testPushRoute(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stats PushStats
	n1, err := r.SubscribePushesWith(ctx, "n1", SubscribeConfig{Logger: quietLogger(), Stats: &stats})
	if err != nil {
		t.Fatal(err)
	}
	n2, err := r.SubscribePushes(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	batches := samplePushBatches()
	unheard, err := r.PublishPushesAll(ctx, []NodePushes{
		{Node: "n1", Batch: batches[2]}, {Node: "n2", Batch: batches[3]}, {Node: "n3", Batch: batches[1]},
	})
	if err != nil || unheard != 1 {
		t.Fatalf("PublishPushesAll = %d unheard, %v; want 1 (n3 has no subscriber)", unheard, err)
	}
	if got := recvBatch(t, n1, "n1"); !equalBatch(got, batches[2]) {
		t.Errorf("n1 got %+v, want %+v", got, batches[2])
	}
	if got := recvBatch(t, n2, "n2"); !equalBatch(got, batches[3]) {
		t.Errorf("n2 got a batch of %d items, want %d", len(got.Items), len(batches[3].Items))
	}
	if err := c.Publish(ctx, pushChannel("n1"), "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.PublishPushes(ctx, "n1", batches[1]); err != nil {
		t.Fatal(err)
	}
	if got := recvBatch(t, n1, "n1: the garbage"); !got.Lost || len(got.Items) != 0 {
		t.Errorf("n1 got %+v for the garbage, want a batch marked lost", got)
	}
	if got := recvBatch(t, n1, "n1 after garbage"); !equalBatch(got, batches[1]) {
		t.Errorf("n1 got %+v after the garbage, want %+v", got, batches[1])
	}
	if stats.Bad.Load() != 1 || stats.Batches.Load() != 2 {
		t.Errorf("stats: %d bad, %d batches; want 1 and 2", stats.Bad.Load(), stats.Batches.Load())
	}
	if err := r.PublishPushes(ctx, "bad node", batches[1]); err == nil {
		t.Error("publishing to an invalid node id succeeded")
	}
	cancel()
	for range n1 { // closes once ctx ended
	}
	for range n2 {
	}
}

// TestPushRouteSurvivesRedisRestart kills redis-server under live
// subscriptions and starts it again: pushes and presence announcements
// must flow again without resubscribing by hand, and the subscribers must
// hear that there was a break.
func TestPushRouteSurvivesRedisRestart(t *testing.T) {
	srv := testserver.NewRedis(t)
	r := newTestRedis(t, newServerClient(t, srv), RedisConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stats PushStats
	pushes, err := r.SubscribePushesWith(ctx, "n1", SubscribeConfig{Logger: quietLogger(), Stats: &stats})
	if err != nil {
		t.Fatal(err)
	}
	announced, err := r.SubscribePresence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch := samplePushBatches()[2]
	if err := r.PublishPushes(ctx, "n1", batch); err != nil {
		t.Fatal(err)
	}
	recvBatch(t, pushes, "before the restart")

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// Publish until someone hears it: the subscription comes back on its own.
	deadline := time.Now().Add(20 * time.Second)
	for {
		unheard, err := r.PublishPushesAll(ctx, []NodePushes{{Node: "n1", Batch: batch}})
		if err == nil && unheard == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no subscriber on n1 20s after the restart (last error %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b := recvBatch(t, pushes, "the break"); len(b.Items) != 0 {
		t.Fatalf("first batch after the restart has %d items, want the empty batch that tells of the break", len(b.Items))
	}
	if b := recvBatch(t, pushes, "after the restart"); !equalBatch(b, batch) {
		t.Fatalf("after the restart: %+v, want %+v", b, batch)
	}
	if stats.Resubscribed.Load() != 1 {
		t.Errorf("resubscribed %d times, want 1", stats.Resubscribed.Load())
	}

	// The presence subscription reconnects on its own schedule; until it
	// is back, announcements are lost (pub/sub keeps nothing, and the
	// presence refresh covers that), so announce until one is heard.
	select {
	case got := <-announced:
		if got != "" {
			t.Fatalf("first announcement after the restart %q, want the empty one that tells of the break", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no reconnect signal on the presence subscription after the restart")
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if err := r.SetOnline(ctx, "n1", []string{"u1"}, time.Minute, true); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-announced:
			if got != "u1" {
				t.Fatalf("announcement %q, want u1", got)
			}
			return
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no announcement of u1 within 10 s after the restart")
		}
	}
}

func testPersistedPrevs(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{WindowSize: 3})
	ctx := context.Background()
	prevsSeen := func(seenFrom int64, before map[string]int64) map[string]int64 {
		t.Helper()
		got, err := r.PersistedPrevs(ctx, "persister", "chat.messages", 0, seenFrom, before)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	prevs := func(before map[string]int64) map[string]int64 {
		t.Helper()
		return prevsSeen(math.MaxInt64, before)
	}
	appendAll(t, r, batchOf("g1", 2, 5, 8)...)
	appendAll(t, r, batchOf("g2", 1, 3, 4, 6)...) // 1 trimmed: floor 1
	ask := map[string]int64{"g1": 8, "g2": 4, "g3": 5}
	if got := prevs(ask); len(got) != 0 {
		t.Errorf("before any saved offset: %v, want nothing certain", got)
	}
	if got := prevs(map[string]int64{"g3": 0}); got["g3"] != -1 {
		t.Errorf("prev of the partition's first record: %v, want -1", got)
	}
	// A caller that read the partition from offset 0 on without meeting
	// g3 before 5: g3 had nothing before it, whatever the persister did.
	if got := prevsSeen(0, map[string]int64{"g3": 5}); !maps.Equal(got, map[string]int64{"g3": -1}) {
		t.Errorf("g3 unseen since offset 0, nothing saved: %v, want -1", got)
	}
	if got := prevsSeen(1, map[string]int64{"g3": 5}); len(got) != 0 {
		t.Errorf("g3 unseen since offset 1, nothing saved: %v, want nothing certain", got)
	}
	// A persister that claimed the partition before its first record saved
	// kafka.FirstOffset (-2): the same as nothing stored.
	if err := r.SaveOffsets(ctx, "persister", "chat.messages", map[int]int64{0: kafka.FirstOffset}); err != nil {
		t.Fatal(err)
	}
	if got := prevsSeen(0, map[string]int64{"g3": 5}); !maps.Equal(got, map[string]int64{"g3": -1}) {
		t.Errorf("g3 unseen since offset 0, the first offset claimed: %v, want -1", got)
	}
	if got := prevsSeen(1, map[string]int64{"g3": 5}); len(got) != 0 {
		t.Errorf("g3 unseen since offset 1, the first offset claimed: %v, want nothing certain", got)
	}
	if err := r.SaveOffsets(ctx, "persister", "chat.messages", map[int]int64{0: 9, 1: 100}); err != nil {
		t.Fatal(err)
	}
	// A position set by hand leaves the state's origin unknown: a group
	// with no window may have had messages before it.
	if got := prevs(map[string]int64{"g3": 9}); len(got) != 0 {
		t.Errorf("g3 before 9, origin unknown: %v, want nothing certain", got)
	}
	// A state begun past the partition's first record (rebuilt after
	// retention moved the log's start) lacks the groups silent since.
	fence := Fence{Consumer: "persister", Topic: "chat.messages", Partition: 0}
	if err := r.SaveOrigin(ctx, fence, 9, Origin{Offset: 1, SentAt: t0}); err != nil {
		t.Fatal(err)
	}
	if got := prevs(map[string]int64{"g1": 2, "g3": 9}); len(got) != 0 {
		t.Errorf("g1 before 2 and g3 before 9, origin 1: %v, want nothing certain", got)
	}
	// The state holds the partition's whole log from here on.
	if err := r.SaveOrigin(ctx, fence, 9, Origin{Offset: 0, SentAt: t0}); err != nil {
		t.Fatal(err)
	}
	// Unseen since an offset the persister has passed: its window is all
	// there is before it.
	for _, tc := range []struct {
		seenFrom, before int64
		want             map[string]int64
	}{
		{9, 12, map[string]int64{"g1": 8}},
		{5, 12, map[string]int64{"g1": 8}},
		{10, 12, map[string]int64{}}, // the persister may not have stored 9
	} {
		if got := prevsSeen(tc.seenFrom, map[string]int64{"g1": tc.before}); !maps.Equal(got, tc.want) {
			t.Errorf("g1 before %d, unseen since %d: %v, want %v", tc.before, tc.seenFrom, got, tc.want)
		}
	}
	for _, tc := range []struct {
		gid    string
		before int64
		want   int64 // -2: unknown
	}{
		{"g1", 8, 5},
		{"g1", 9, 8},
		{"g1", 6, 5},
		{"g1", 2, -1},  // nothing earlier, nothing ever trimmed
		{"g1", 10, -2}, // the persister has not stored everything before 10
		{"g2", 4, 3},
		{"g2", 3, -2}, // earlier messages were trimmed
		{"g3", 9, -1},
	} {
		got, ok := prevs(map[string]int64{tc.gid: tc.before})[tc.gid]
		if !ok {
			got = -2
		}
		if got != tc.want {
			t.Errorf("prev of %s before %d = %d, want %d (-2: unknown)", tc.gid, tc.before, got, tc.want)
		}
	}
	if got := prevs(ask); !maps.Equal(got, map[string]int64{"g1": 5, "g2": 3, "g3": -1}) {
		t.Errorf("all at once: %v", got)
	}
}
