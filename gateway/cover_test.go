package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// A node's connections syncing at once share the reads of the log's ends,
// and each gets ends read after the moment it asked for.
func TestSyncsShareTheReadsOfTheLogsEnds(t *testing.T) {
	epoch := time.Now()
	now := func() time.Duration { return time.Since(epoch) + 1 }
	var f sharedRead
	var reads atomic.Int64
	fetch := func(context.Context) (map[int]int64, error) {
		n := reads.Add(1)
		time.Sleep(5 * time.Millisecond)
		return map[int]int64{0: n}, nil
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			asked := now()
			before := reads.Load() // reads begun before asked: their results must not be given
			ends, err := f.after(context.Background(), asked, now, fetch)
			if err != nil || ends[0] <= before {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d of 1,000 got ends read before they asked, or an error", bad.Load())
	}
	if n := reads.Load(); n > 200 {
		t.Fatalf("%d reads of the ends for 1,000 syncs: not shared", n)
	}
	t.Logf("%d reads for 1,000 syncs", reads.Load())
}

// The first sync of a connection is checked; in a group whose partition
// is empty, with the persister holding it from its start (its position
// kafka.FirstOffset, -2), there is nothing to store and the check ends at
// once. It used to wait for the persister to pass offset 0, reading its
// position every coverPoll for as long as the connection lived.
func TestTheCheckOfASyncOverAnEmptyPartitionEnds(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("quiet", "bob")
	ctx := context.Background()
	part := topics.Partition("quiet", 4)
	waitFor(t, "the persister to claim the empty partition's start", 10*time.Second, func() bool {
		stored, err := e.redis.Offsets(ctx, consumers.GroupPersister, topics.Messages)
		return err == nil && stored[part] == kafka.FirstOffset
	})
	bob := e.connect(0, "bob", nil)
	defer bob.c.Close()
	e.waitSyncChecked(0, "bob")
	g := e.gws[0].g
	g.stored.mu.Lock()
	defer g.stored.mu.Unlock()
	if g.stored.waiters != 0 {
		t.Fatalf("%d connections still wait for the persister", g.stored.waiters)
	}
}

// waitSyncChecked waits until the first sync of every connection of uid
// on gateway gwi has been checked (see syncCovered).
func (e *env) waitSyncChecked(gwi int, uid string) {
	e.t.Helper()
	g := e.gws[gwi].g
	waitFor(e.t, uid+"'s connection registered", 20*time.Second, func() bool { return g.hub.has(uid) })
	// The check reads the log's ends no sooner than presenceLag (2 s) after
	// the connection registered, and then waits for the persister.
	waitFor(e.t, "the check of "+uid+"'s sync to end", 20*time.Second, func() bool {
		var open int
		g.hub.each(uid, func(c *conn) {
			if c.coverSince.Load() != 0 {
				open++
			}
		})
		return open == 0
	})
}

// While the log's ends cannot be read (the broker down), the checks that
// retry keep to one read every endsGap between them, as when reads
// succeed: a node's connections retrying must not hammer the broker with
// reads back to back.
func TestFailedReadsOfTheLogsEndsKeepTheirGap(t *testing.T) {
	epoch := time.Now()
	now := func() time.Duration { return time.Since(epoch) + 1 }
	var f sharedRead
	var reads atomic.Int64
	fetch := func(context.Context) (map[int]int64, error) {
		reads.Add(1)
		return nil, errors.New("broker down (the test)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				f.after(ctx, now(), now, fetch)
			}
		}()
	}
	wg.Wait()
	// Let the reads in flight or queued end, so that none outlives the test.
	f.after(context.Background(), now(), now, fetch)
	if n, most := reads.Load(), int64(500*time.Millisecond/endsGap)+3; n > most {
		t.Fatalf("%d failed reads of the ends in 500 ms; want at most %d, one every %v", n, most, endsGap)
	}
}

// The first syncs of a node's connections reconnecting at once share the
// reads of the persister's position as they share those of the log's ends:
// a storm of reconnects used to be one Redis read a sync.
func TestSyncsShareTheReadsOfThePersistersPosition(t *testing.T) {
	e := newEnv(t, envOpts{})
	g := e.gws[0].g
	var reads atomic.Int64
	read := g.reads.stored
	g.reads.stored = func(ctx context.Context) (map[int]int64, error) {
		reads.Add(1)
		time.Sleep(10 * time.Millisecond) // a Redis busy with the storm
		return read(ctx)
	}
	const users = 100
	conns := make([]*raw, users)
	for i := range conns {
		conns[i] = e.login(0, fmt.Sprintf("u%d", i))
	}
	var wg sync.WaitGroup
	for _, r := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.send(map[string]any{"op": protocol.OpSync, "id": "s"})
		}()
	}
	wg.Wait()
	for _, r := range conns {
		if f := r.answer(); f["op"] != protocol.OpSynced {
			t.Fatalf("a sync was answered %v", f)
		}
	}
	if n := reads.Load(); n > users/4 {
		t.Fatalf("%d reads of the persister's position for %d first syncs: not shared", n, users)
	}
	t.Logf("%d reads of the persister's position for %d first syncs", reads.Load(), users)
}

// A member whose coming online the fan-out missed (its cached lookup
// still says offline, for up to its PresenceTTL) is not pushed what is
// sent meanwhile, even after his first sync. The check of that sync reads
// the log's ends no sooner than presenceLag after he registered, and
// tells him to sync again for it. It used to read them at once and miss
// such a message, which then waited for his next connect.
func TestAMessageTheFanoutTookHimOfflineForIsSyncedAfter(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob")
	alice := e.connect(0, "alice", nil)
	e.waitSyncChecked(0, "alice")
	e.gws[0].g.quietOnline = func(uid string) bool { return uid == "bob" }
	ctx := context.Background()
	first, err := alice.c.Send(ctx, "g", "the fan-out looks bob up: offline, and caches it")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alice gets the first pushed", 10*time.Second, func() bool { return len(alice.delivered("g")) == 1 })
	bob := e.connect(0, "bob", nil)
	if err := bob.c.Open(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob pulls the first", 10*time.Second, func() bool { return len(bob.delivered("g")) == 1 })
	time.Sleep(300 * time.Millisecond) // past a check that reads the ends at once
	late, err := alice.c.Send(ctx, "g", "sent while the fan-out still takes bob for offline")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob gets the message the fan-out did not push him", 10*time.Second, func() bool { return len(bob.delivered("g")) == 2 })
	bob.checkExactlyOnceInOrder(t, "g", []int64{first, late})
	if st := bob.c.Stats(); st.Resyncs != 1 || st.Reconnects != 0 {
		t.Errorf("bob: %+v; want one resync, on the same connection", st)
	}
}

// Messages pushed to a connection after its first sync are not a reason
// to sync again, though the check reads the log's ends past them.
func TestMessagesPushedAfterTheFirstSyncBringNoResync(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob")
	alice := e.connect(0, "alice", nil)
	e.waitSyncChecked(0, "alice")
	ctx := context.Background()
	bob := e.connect(0, "bob", nil)
	if err := bob.c.Open(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	var sent []int64
	for i := range 3 {
		id, err := alice.c.Send(ctx, "g", fmt.Sprint("right after bob's sync ", i))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, id)
	}
	waitFor(t, "bob gets them pushed", 10*time.Second, func() bool { return len(bob.delivered("g")) == 3 })
	e.waitSyncChecked(0, "bob")
	// The check ends once any resync it sends is queued: the answer to a
	// request bob makes now comes after it on his connection, and his
	// client takes frames in order.
	if _, err := bob.c.ReadCounts(ctx, "g", sent); err != nil {
		t.Fatal(err)
	}
	bob.checkExactlyOnceInOrder(t, "g", sent)
	if n := e.gws[0].g.Stats().Resyncs; n != 0 {
		t.Errorf("the gateway sent %d resync frames; want none", n)
	}
	if st := bob.c.Stats(); st.Resyncs != 0 {
		t.Errorf("bob, who got every message by push: %+v; want no resync", st)
	}
}

// A member added to a group during his first seconds online, while the
// fan-out still takes him for offline, is not pushed the group's first
// message, and his first sync did not list the group: nothing shows him
// either. The check of that sync looks at the groups he is a member of by
// then, not only at those the sync answered for, and tells him to sync
// again. It used to check only the sync's groups, and he learnt of the
// group at its next message or his next connect.
func TestAGroupJoinedDuringTheCheckIsSyncedAfter(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob")
	e.group("g2", "alice")
	alice := e.connect(0, "alice", nil)
	e.waitSyncChecked(0, "alice")
	e.gws[0].g.quietOnline = func(uid string) bool { return uid == "bob" }
	ctx := context.Background()
	if _, err := alice.c.Send(ctx, "g", "the fan-out looks bob up: offline, and caches it"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alice gets the first pushed", 10*time.Second, func() bool { return len(alice.delivered("g")) == 1 })
	bob := e.connect(0, "bob", nil)
	waitFor(t, "bob's first sync", 10*time.Second, func() bool { return len(bob.c.Groups()) == 1 })
	if st, out := e.http("POST", "/v1/admin/groups/g2/members", adminToken, map[string]any{"uid": "bob"}); st != 200 {
		t.Fatalf("add bob to g2: %d %v", st, out)
	}
	e.waitMembers("g2", "alice", "bob")
	late, err := alice.c.Send(ctx, "g2", "sent while the fan-out still takes bob for offline")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob told of g2 and its message", 10*time.Second, func() bool {
		if len(bob.delivered("g2")) > 0 {
			return true // pushed after all: nothing to check
		}
		for _, gs := range bob.c.Groups() {
			if gs.Gid == "g2" && gs.Head == late {
				return true
			}
		}
		return false
	})
	if got := bob.delivered("g2"); len(got) > 0 {
		t.Fatalf("bob was pushed %v: the fan-out knew him online, and the test shows nothing", got)
	}
	if st := bob.c.Stats(); st.Resyncs != 1 || st.Reconnects != 0 {
		t.Errorf("bob: %+v; want one resync, on the same connection", st)
	}
}

// A push to many connections whose first sync is being checked, as when a
// node's connections all reconnect at once, is decoded once for all of
// them, not once for each: a message of a large group would cost a JSON
// decode of its body per recipient here.
func TestAPushIsDecodedOnceForTheConnectionsUnderCheck(t *testing.T) {
	const conns = 1000
	g := &Gateway{hub: newHub()}
	it := store.PushItem{Msg: protocol.Marshal(protocol.Message{Gid: "g", MsgID: 7, Sender: "s", Body: strings.Repeat("x", 4096)})}
	all := make([]*conn, conns)
	for i := range all {
		c := &conn{g: g, uid: fmt.Sprint("u", i)}
		c.coverFrom(1)
		g.hub.admit(c.uid, 1)
		g.hub.add(c)
		all[i] = c
		it.Uids = append(it.Uids, c.uid)
	}
	b := store.PushBatch{Items: []store.PushItem{it}}
	allocs := testing.AllocsPerRun(5, func() { g.perConn(b) })
	for _, c := range all {
		if low, ok := c.pushedFrom("g"); !ok || low != 7 {
			t.Fatalf("%s: pushed %d, %v; want 7 noted", c.uid, low, ok)
		}
	}
	// Each connection's slice of the batch takes one allocation; a decode
	// per connection took at least one more each.
	if allocs > conns*3/2 {
		t.Fatalf("%.0f allocations to hand one message to %d connections under check: decoded for each", allocs, conns)
	}
	t.Logf("%.0f allocations for %d connections", allocs, conns)
}

// has reports whether uid has a connection on this node.
func (h *hub) has(uid string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.users[uid]) > 0
}
