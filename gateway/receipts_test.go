package gateway

import (
	"context"
	"fmt"
	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/topics"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/protocol"
)

// truth recomputes read counts from the final read cursors and membership
// at send time, the way the design defines them.
type truth struct {
	sender  string
	members map[string][2]int64 // uid -> (joined after, left at or -1 ... as positions)
	reads   map[string]int64
}

func (tr truth) who(msgid int64) (read, unread []string) {
	for uid, span := range tr.members {
		if uid == tr.sender || msgid <= span[0] || (span[1] >= 0 && msgid > span[1]) {
			continue
		}
		if c, ok := tr.reads[uid]; ok && c >= msgid {
			read = append(read, uid)
		} else {
			unread = append(unread, uid)
		}
	}
	slices.Sort(read)
	slices.Sort(unread)
	return read, unread
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

func TestReadCountsExactAfterRandomReadsAndReplay(t *testing.T) {
	e := newEnv(t, envOpts{})
	readers := []string{"r0", "r1", "r2", "r3", "r4"}
	e.group("g", append([]string{"s", "gone"}, readers...)...)
	s := e.login(0, "s")
	send := func(i int) int64 {
		f := s.call(map[string]any{"op": "send", "gid": "g", "cmid": fmt.Sprint("m", i), "body": fmt.Sprint("message ", i)})
		return int64(f["msgid"].(float64))
	}
	var ids []int64
	for i := 0; i < 4; i++ {
		ids = append(ids, send(i))
	}
	if st, _ := e.http("POST", "/v1/admin/groups/g/members", adminToken, map[string]any{"uid": "late"}); st != 200 {
		t.Fatal("add late")
	}
	e.waitMembers("g", "late")
	for i := 4; i < 8; i++ {
		ids = append(ids, send(i))
	}
	e.removeMember("g", "gone")
	for i := 8; i < 10; i++ {
		ids = append(ids, send(i))
	}
	waitFor(t, "persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "g"); return h == ids[9] })
	ms, _ := e.redis.Members(context.Background(), "g")
	tr := truth{sender: "s", members: map[string][2]int64{}, reads: map[string]int64{}}
	for uid, m := range ms {
		left := int64(-1)
		if m.State == 2 {
			left = m.LeftAt
		}
		tr.members[uid] = [2]int64{m.JoinedAt, left}
		tr.reads[uid] = m.JoinedAt // a joiner's read cursor starts at the join
	}

	// Random reads: out of order, repeated, from two devices per user.
	rng := rand.New(rand.NewPCG(3, 4))
	devices := map[string][]*raw{}
	for _, u := range append(readers, "late", "gone") {
		devices[u] = []*raw{e.login(0, u), e.login(0, u)}
	}
	for n := 0; n < 120; n++ {
		u := []string{"r0", "r1", "r2", "r3", "r4", "late", "gone"}[rng.IntN(7)]
		upto := ids[rng.IntN(len(ids))]
		if u == "gone" {
			upto = min(upto, tr.members["gone"][1])
		}
		if upto <= tr.members[u][0] {
			continue
		}
		f := devices[u][rng.IntN(2)].call(map[string]any{"op": "read", "gid": "g", "upto": upto})
		if f["op"] != "ok" {
			t.Fatalf("%s read %d: %v", u, upto, f)
		}
		tr.reads[u] = max(tr.reads[u], upto)
	}
	check := func(when string) {
		t.Helper()
		waitFor(t, "read cursors "+when, 20*time.Second, func() bool {
			cur, _ := e.redis.ReadCursors(context.Background(), "g")
			for u, c := range tr.reads {
				if cur[u] != c {
					return false
				}
			}
			return true
		})
		e.waitReplayed("g") // after a wipe, counts wait for the memberships' replay
		counts := s.call(map[string]any{"op": "read_counts", "gid": "g", "msgids": ids})
		list, ok := counts["counts"].([]any)
		if !ok {
			t.Fatalf("%s: read_counts answered %v", when, counts)
		}
		for i, c := range list {
			c := c.(map[string]any)
			read, unread := tr.who(ids[i])
			if int(c["read"].(float64)) != len(read) || int(c["audience"].(float64)) != len(read)+len(unread) {
				t.Fatalf("%s: counts of %d = %v, want read %v unread %v", when, ids[i], c, read, unread)
			}
			f := s.call(map[string]any{"op": "who_read", "gid": "g", "msgid": ids[i]})
			if fmt.Sprint(strs(f["read"])) != fmt.Sprint(read) || fmt.Sprint(strs(f["unread"])) != fmt.Sprint(unread) {
				t.Fatalf("%s: who_read %d = %v / %v, want %v / %v", when, ids[i], f["read"], f["unread"], read, unread)
			}
		}
	}
	check("live")
	e.restartAll(func() {
		if err := e.rc.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, "replayed", 20*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "g"); return h == ids[9] })
	check("after wiping Redis and replaying")

	carol := e.login(0, "carol")
	if f := carol.call(map[string]any{"op": "read_counts", "gid": "g", "msgids": ids[:1]}); code(f) != string(protocol.CodeNotMember) {
		t.Fatalf("non-member read_counts: %v", f)
	}
	if f := carol.call(map[string]any{"op": "who_read", "gid": "g", "msgid": ids[0]}); code(f) != string(protocol.CodeNotMember) {
		t.Fatalf("non-member who_read: %v", f)
	}
}

func TestSenderGetsReceiptsLiveAndOnRequest(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "s", "r")
	got := make(chan protocol.Receipts, 16)
	sender := e.connect(0, "s", func(c *client.Config) { c.OnReceipts = func(r protocol.Receipts) { got <- r } })
	reader := e.login(0, "r")
	ctx := context.Background()
	id, err := sender.c.Send(ctx, "g", "did you read this?")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(ctx, "g"); return h == id })
	e.waitNotifierJoined()
	start := time.Now()
	if f := reader.call(map[string]any{"op": "read", "gid": "g", "upto": id}); f["op"] != "ok" {
		t.Fatal(f)
	}
	select {
	case r := <-got:
		if r.Gid != "g" || len(r.Counts) != 1 || r.Counts[0].MsgID != id || r.Counts[0].Read != 1 || r.Counts[0].Audience != 1 {
			t.Fatalf("receipts push %+v", r)
		}
		t.Logf("receipt pushed %v after the read", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("no receipts push within 5 s of the read")
	}
	sender.c.Close()

	// Offline meanwhile: after reconnecting, the sender asks.
	again := e.connect(0, "s", nil)
	counts, err := again.c.ReadCounts(ctx, "g", []int64{id})
	if err != nil || len(counts) != 1 || counts[0].Read != 1 {
		t.Fatalf("read counts on request: %+v %v", counts, err)
	}
	read, unread, err := again.c.WhoRead(ctx, "g", id)
	if err != nil || fmt.Sprint(read) != "[r]" || len(unread) != 0 {
		t.Fatalf("who read: %v %v %v", read, unread, err)
	}
}

// Any member may ask read_counts at the frame rate, and each answer loaded
// the group's every member and read cursor from Redis (about 6 ms of its
// CPU at 10,000 members). A burst of them loads the group once: counts are
// at most readStateFresh old. Counted in redis-server's ZRANGE calls, of
// which an answer makes two to load the group and one to find its messages.
func TestReadCountsInABurstLoadTheGroupOnce(t *testing.T) {
	e, alice, id := aliceSaidHi(t)
	ctx := context.Background()
	zranges := func() int {
		t.Helper()
		v, err := testserver.RedisInfo(ctx, e.rc, "commandstats", "cmdstat_zrange")
		if err != nil {
			t.Fatal(err)
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
		n, _ := strconv.Atoi(calls)
		return n
	}
	const asks = 20
	before := zranges()
	start := time.Now()
	for range asks {
		if f := alice.call(map[string]any{"op": "read_counts", "gid": "g", "msgids": []int64{id}}); f["op"] != "counts" {
			t.Fatalf("read_counts: %v", f)
		}
	}
	took := time.Since(start)
	loads := 1 + int(took/readStateFresh) // one per readStateFresh, on a machine slow enough to take longer
	if n := zranges() - before; n > asks+2*loads {
		t.Errorf("%d read_counts in %v made redis-server run ZRANGE %d times; want at most %d (the group loaded %d times)",
			asks, took.Round(time.Millisecond), n, asks+2*loads, loads)
	}
}

// Read counts of a group whose read cursors are being rebuilt (chatctl
// rebuild receipts wipes them, with the projector's replay marks) or
// replayed would count too few readers: the gateway answers unavailable,
// saying so, until the projection is marked replayed again.
func TestReadCountsWaitForTheirCursorsToBeRebuilt(t *testing.T) {
	e, alice, id := aliceSaidHi(t)
	ctx := context.Background()
	part := topics.Partition("g", 4)
	waitFor(t, "the read cursors replayed", 20*time.Second, func() bool {
		return e.redis.CheckReplayed(ctx, consumers.GroupReceiptProjector, topics.Receipts, part) == nil
	})
	if err := e.rc.HDel(ctx, "chat:offsets:"+consumers.GroupReceiptProjector, fmt.Sprintf("%s/%d/replayed", topics.Receipts, part)).Err(); err != nil {
		t.Fatal(err)
	}
	f := alice.call(map[string]any{"op": "read_counts", "gid": "g", "msgids": []int64{id}})
	if msg, _ := f["message"].(string); code(f) != string(protocol.CodeUnavailable) || !strings.Contains(msg, "being rebuilt") {
		t.Fatalf("read_counts while the read cursors are rebuilt: %v; want unavailable, being rebuilt", f)
	}
	if _, err := e.redis.MarkReplayed(ctx, consumers.GroupReceiptProjector, topics.Receipts, part); err != nil {
		t.Fatal(err)
	}
	if f := alice.call(map[string]any{"op": "read_counts", "gid": "g", "msgids": []int64{id}}); f["op"] != "counts" {
		t.Fatalf("read_counts once the read cursors are marked replayed: %v", f)
	}
}

// aliceSaidHi makes group g of alice and bob, logs alice in and has her
// send one message, which it waits to be persisted.
func aliceSaidHi(t *testing.T) (*env, *raw, int64) {
	t.Helper()
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob")
	alice := e.login(0, "alice")
	id := sendHi(t, alice, "g", "c1")
	waitFor(t, "the message persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "g"); return h == id })
	return e, alice, id
}
