package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
)

// A push lost while the gateway's push route to Redis is broken must not
// stay lost until the group's next message: once the route is back, the
// gateway asks its clients to sync, and they pull what they missed.
func TestAPushLostWhileThePushRouteBrokeIsPulledAfterIt(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob")
	var dropping atomic.Bool
	var dropped atomic.Int64
	e.gws[0].g.dropPush = func(uid string) bool {
		if uid != "bob" || !dropping.Load() {
			return false
		}
		dropped.Add(1)
		return true
	}
	alice, bob := e.connect(0, "alice", nil), e.connect(0, "bob", nil)
	ctx := context.Background()
	if err := bob.c.Open(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	first, err := alice.c.Send(ctx, "g", "before the break")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob gets the first message", 10*time.Second, func() bool { return len(bob.delivered("g")) == 1 })

	// The route breaks: what is published meanwhile is lost (dropped here,
	// as a message published to nobody would be).
	dropping.Store(true)
	lost, err := alice.c.Send(ctx, "g", "while the route is down")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lost message stored", 10*time.Second, func() bool { h, _ := e.redis.Head(ctx, "g"); return h == lost })
	waitFor(t, "its push to bob dropped", 10*time.Second, func() bool { return dropped.Load() > 0 })
	dropping.Store(false)
	before := e.gws[0].g.Stats().Resyncs
	if n, err := e.rc.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n == 0 {
		t.Fatalf("killing the pub/sub connections: %d killed, %v", n, err)
	}

	// No other message follows: only the resync can bring it.
	waitFor(t, "bob gets the lost message without another one sent", 15*time.Second, func() bool { return len(bob.delivered("g")) == 2 })
	bob.checkExactlyOnceInOrder(t, "g", []int64{first, lost})
	if got := e.gws[0].g.Stats().Resyncs - before; got != 2 {
		t.Errorf("the gateway sent %d resync frames, want one for each of its 2 connections", got)
	}
	if st := bob.c.Stats(); st.Resyncs != 1 || st.Reconnects != 0 {
		t.Errorf("bob: %+v; want one resync, on the same connection", st)
	}
}

// A message sent while the persister is stopped (ClickHouse down, say) is
// not in the heads of a sync answered meanwhile, and was not pushed to a
// member who connected after it was fanned out. Once the persister has
// stored it, the gateway tells that member to sync again; a member whose
// sync was complete hears nothing.
func TestASyncAnsweredBeforeTheStoreCaughtUpIsFollowedByAResync(t *testing.T) {
	lateStore(t, nil)
}

// The check of a sync holds when its first reads fail.
func TestASyncIsCheckedWhenItsReadsFail(t *testing.T) {
	failing := func(n int64, read func(context.Context) (map[int]int64, error)) func(context.Context) (map[int]int64, error) {
		var left atomic.Int64
		left.Store(n)
		return func(ctx context.Context) (map[int]int64, error) {
			if left.Add(-1) >= 0 {
				return nil, errors.New("read refused by the test")
			}
			return read(ctx)
		}
	}
	t.Run("the persister's position", func(t *testing.T) {
		lateStore(t, func(g *Gateway) { g.reads.stored = failing(1, g.reads.stored) })
	})
	t.Run("the log's ends", func(t *testing.T) {
		lateStore(t, func(g *Gateway) { g.reads.ends = failing(3, g.reads.ends) })
	})
}

// lateStore shows a member who connected while the persister was stopped
// told to sync again once it has stored what he missed; breakReads, if
// set, is called on the gateway as he connects.
func lateStore(t *testing.T, breakReads func(*Gateway)) {
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob")
	alice := e.connect(0, "alice", nil)
	e.waitSyncChecked(0, "alice") // a send before could be above her sync's head and below the ends its check reads
	ctx := context.Background()
	first := e.storeThenStopThePersister(alice)
	late, err := alice.c.Send(ctx, "g", "sent while the store is stopped")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alice gets it pushed", 10*time.Second, func() bool { return len(alice.delivered("g")) == 2 })
	if breakReads != nil {
		breakReads(e.gws[0].g)
	}
	bob := e.connect(0, "bob", nil)
	if err := bob.c.Open(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob pulls the first", 10*time.Second, func() bool { return len(bob.delivered("g")) == 1 })
	// The check of his sync has read the log's ends and waits for the
	// store: what it would resync for, and what the fan-out handled before
	// it saw him online, is behind it.
	waitFor(t, "the check of bob's sync to wait for the store", 20*time.Second, func() bool {
		var watching bool
		e.gws[0].g.hub.each("bob", func(c *conn) {
			since := c.coverSince.Load()
			watching = watching || since != 0 && c.coverWatch.Load() == since
		})
		return watching
	})
	if n := len(bob.delivered("g")); n != 1 {
		t.Fatalf("bob has %d messages while the store lacks the second; the test is not testing", n)
	}

	e.runConsumer("persister", e.parts["persister"].mk)
	waitFor(t, "bob gets the late message without another one sent", 15*time.Second, func() bool { return len(bob.delivered("g")) == 2 })
	bob.checkExactlyOnceInOrder(t, "g", []int64{first, late})
	if st := bob.c.Stats(); st.Resyncs != 1 || st.Reconnects != 0 {
		t.Errorf("bob: %+v; want one resync, on the same connection", st)
	}
	// A resync for alice would come of the store catching up, as bob's
	// did, which is counted once queued: once it is, and bob has pulled
	// what it told him of, the answer to a request alice makes now comes
	// after any resync queued for her on her connection, and her client
	// takes frames in order.
	g := e.gws[0].g
	waitFor(t, "bob's resync counted", 10*time.Second, func() bool { return g.Stats().Resyncs >= 1 })
	if _, err := alice.c.ReadCounts(ctx, "g", []int64{first, late}); err != nil {
		t.Fatal(err)
	}
	if n := g.Stats().Resyncs; n != 1 {
		t.Errorf("the gateway sent %d resync frames; want bob's only", n)
	}
	if st := alice.c.Stats(); st.Resyncs != 0 {
		t.Errorf("alice, whose sync was complete: %+v; want no resync", st)
	}
}

// A late_store resync ends the check of the moment it was about: the sync
// it asks for reads the heads after the store caught up, and it and the
// syncs after it are not checked again. The check used to stay open: a
// sync after it, seeing ends read later than the store's position (other
// connections' checks read them, messages kept coming), was found behind
// with its watch already spent, so the check never ended and every later
// sync of the connection paid one more read.
func TestALateStoreResyncEndsTheCheck(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob", "carol")
	alice := e.connect(0, "alice", nil)
	e.waitSyncChecked(0, "alice")
	ctx := context.Background()
	e.storeThenStopThePersister(alice)
	if _, err := alice.c.Send(ctx, "g", "sent while the store is stopped"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alice gets it pushed", 10*time.Second, func() bool { return len(alice.delivered("g")) == 2 })
	bob := e.login(0, "bob")
	defer bob.ws.CloseNow()
	if f := bob.call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("bob's sync: %v", f)
	}
	e.runConsumer("persister", e.parts["persister"].mk)
	for {
		f := bob.read()
		if f["op"] == protocol.OpResync {
			if f["reason"] != protocol.ResyncLateStore {
				t.Fatalf("resync for %v, want %s", f["reason"], protocol.ResyncLateStore)
			}
			break
		}
	}

	// The store lags again, and another connection's check reads the
	// log's ends past what it has stored.
	e.parts["persister"].stop()
	later, err := alice.c.Send(ctx, "g", "sent while the store is stopped again")
	if err != nil {
		t.Fatal(err)
	}
	carol := e.connect(0, "carol", nil)
	defer carol.c.Close()
	g := e.gws[0].g
	part := topics.Partition("g", 4)
	waitFor(t, "ends read past the new message", 10*time.Second, func() bool {
		g.ends.mu.Lock()
		defer g.ends.mu.Unlock()
		return g.ends.last != nil && g.ends.last.ends[part] > later
	})

	if f := bob.call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("bob's sync after the resync: %v", f)
	}
	e.waitSyncChecked(0, "bob")
}

// A push route that breaks again while the connections are being told to
// sync starts the telling over, at the same pace: two breaks in a row
// must not add their storms up (ten thousand connections told twice as
// fast as the pace), and every connection is told after the last break.
func TestBreaksInARowKeepTheResyncPace(t *testing.T) {
	g := &Gateway{log: slog.New(slog.NewTextHandler(io.Discard, nil)), hub: newHub(), epoch: time.Now(),
		resyncAsk: make(chan string, 1), pace: resyncPace{burst: 2, every: 100 * time.Millisecond}}
	var conns []*conn
	for i := range 10 {
		c := &conn{g: g, uid: fmt.Sprint("u", i), queue: outQueue{stopped: true}} // frames are dropped
		g.hub.add(c)
		conns = append(conns, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.resyncConns(ctx) }()
	defer func() { cancel(); <-done }()
	told := func() int64 { return g.metrics.resyncs.Load() }

	// The first burst comes after the first ask, so the next one, a pace
	// after the first, comes at least a pace after the ask. (The time the
	// test sees the first burst is later than the burst by however long
	// its poll and the scheduler take.)
	asked := time.Now()
	g.askResync(protocol.ResyncPushRoute)
	waitFor(t, "the first burst", 5*time.Second, func() bool { return told() >= 2 })
	g.askResync(protocol.ResyncPushRoute) // the route broke again
	waitFor(t, "the next burst", 5*time.Second, func() bool { return told() >= 3 })
	if d := time.Since(asked); d < g.pace.every {
		t.Fatalf("%d resync frames within %v of the first ask; want at most %d every %v", told(), d, g.pace.burst, g.pace.every)
	}
	waitFor(t, "every connection told after the second break", 5*time.Second, func() bool { return told() >= 12 })
	since := conns[0].coverSince.Load()
	for _, c := range conns {
		if c.coverSince.Load() != since {
			t.Fatalf("%s must cover the moment of the second break", c.uid)
		}
	}
}

// storeThenStopThePersister has m send a message to g, waits until the
// persister has stored it, and stops the persister; it returns the msgid.
func (e *env) storeThenStopThePersister(m *member) int64 {
	e.t.Helper()
	ctx := context.Background()
	first, err := m.c.Send(ctx, "g", "stored")
	if err != nil {
		e.t.Fatal(err)
	}
	waitFor(e.t, "the first message stored", 10*time.Second, func() bool { h, _ := e.redis.Head(ctx, "g"); return h == first })
	e.parts["persister"].stop()
	return first
}

// A push batch the gateway cannot decode (a newer fan-out's, during an
// upgrade) carried pushes for its connections, who missed them: they are
// told to sync, once for a stream of such batches.
func TestAPushBatchTheGatewayCannotReadHasItsConnectionsSync(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g", "alice", "bob")
	alice, bob := e.connect(0, "alice", nil), e.connect(0, "bob", nil)
	ctx := context.Background()
	if err := bob.c.Open(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.c.Send(ctx, "g", "first"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob gets the first message", 10*time.Second, func() bool { return len(bob.delivered("g")) == 1 })
	before := e.gws[0].g.Stats().Resyncs
	for range 3 {
		if err := e.rc.Publish(ctx, "chat:push:"+e.gws[0].g.Node(), "a batch of a format to come").Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "bob told to sync", 10*time.Second, func() bool { return bob.c.Stats().Resyncs == 1 })
	if got := e.gws[0].g.Stats().Resyncs - before; got != 2 {
		t.Errorf("the gateway sent %d resync frames for 3 batches it could not read; want one for each of its 2 connections", got)
	}
	// One more within the gap, and no other: its connections are told
	// once more, at the gap's end.
	if err := e.rc.Publish(ctx, "chat:push:"+e.gws[0].g.Node(), "one more").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connections told again", lostResyncGap+5*time.Second, func() bool { return e.gws[0].g.Stats().Resyncs-before == 4 })
}
