package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
)

// failPresence is a go-redis hook that, while on, fails the scripts that
// write key (a user's presence: SetOnline), as a Redis blip would. With
// hold set, the first of them waits for hold to close before it fails.
// Reads of the key (the fan-out's lookups) and its clearing go through.
type failPresence struct {
	key    string
	on     atomic.Bool
	pass   chan struct{} // when set, writes wait for it to close and go through, not fail
	hold   chan struct{}
	held   atomic.Bool // a write waits for hold
	failed atomic.Int64
	wrote  atomic.Int64 // writes let through
}

func (h *failPresence) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *failPresence) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *failPresence) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, h.writes) {
			return next(ctx, cmds)
		}
		if !h.on.Load() {
			err := next(ctx, cmds)
			if err == nil {
				h.wrote.Add(1)
			}
			return err
		}
		if h.pass != nil {
			<-h.pass
			return next(ctx, cmds)
		}
		if h.hold != nil && h.held.CompareAndSwap(false, true) {
			<-h.hold
		}
		h.failed.Add(1)
		err := errors.New("presence write refused by the test")
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

func (h *failPresence) writes(c redis.Cmder) bool {
	if n := c.Name(); n != "evalsha" && n != "eval" {
		return false
	}
	return slices.Contains(c.Args(), any(h.key))
}

// closeOf returns the close error of err, or nil if err is no close.
func closeOf(err error) *websocket.CloseError {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return &ce
	}
	return nil
}

// awaitClose reads r's frames until its connection closes, or for at most
// d; it returns the close and the ops of the frames read before it.
func (r *raw) awaitClose(d time.Duration) (*websocket.CloseError, []string, error) {
	var ops []string
	deadline := time.Now().Add(d)
	for {
		f, err := r.tryRead(time.Until(deadline))
		if err != nil {
			return closeOf(err), ops, err
		}
		op := fmt.Sprint(f["op"])
		if f["reason"] != nil {
			op += "(" + fmt.Sprint(f["reason"]) + ")"
		}
		ops = append(ops, op)
	}
}

// A connection whose user's presence cannot be written (Redis failing
// the write through every retry) is closed with 1013, try again later,
// rather than served: the fan-out would push it nothing, and the check of
// its first sync covers only what was sent within presenceLag of its
// coming, so a message sent later would reach the client only at the
// group's next push or its next sync. It used to be served, the failure
// only logged. Reconnected once Redis takes the write, the client gets
// the message.
func TestAConnectionWhosePresenceCannotBeWrittenIsToldToReconnect(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	g := e.gws[0].g
	fail := &failPresence{key: "chat:{u:bob}:nodes"}
	fail.on.Store(true)
	e.rc.AddHook(fail)
	alice := e.login(0, "alice")
	bob := e.login(0, "bob")
	bob.send(map[string]any{"op": protocol.OpSync, "id": "s"})
	f, err := bob.tryRead(2 * announceWithin)
	if err == nil {
		// Served: the check of the sync reads the log's ends presenceLag
		// after bob came; a message sent after it is not checked.
		if f["op"] != protocol.OpSynced {
			t.Fatalf("bob's first frame after authed: %v, want the sync's answer or a close", f)
		}
		e.waitSyncChecked(0, "bob")
	}
	if fail.failed.Load() == 0 {
		t.Fatal("no write of bob's presence was refused; the test refuses none")
	}
	sent := alice.call(map[string]any{"op": protocol.OpSend, "gid": "g1", "cmid": "m", "body": "sent after bob's presence failed"})
	msgid, ok := sent["msgid"].(float64)
	if !ok {
		t.Fatalf("alice's send: %v", sent)
	}
	var ops []string
	if err == nil {
		_, ops, err = bob.awaitClose(2 * announceWithin)
	}
	ce := closeOf(err)
	if ce == nil || ce.Code != websocket.StatusTryAgainLater || ce.Reason != tryAgainReason {
		t.Fatalf("bob, whose presence could not be written, after the sync's answer: frames %v, then %v; "+
			"want a close %d %q: message %v reached him neither by push nor by a resync",
			ops, err, websocket.StatusTryAgainLater, tryAgainReason, msgid)
	}
	if n := g.Stats().PresenceRefused; n != 1 {
		t.Errorf("PresenceRefused = %d, want 1", n)
	}

	fail.on.Store(false) // Redis is back
	waitFor(t, "the store to hold alice's message", 10*time.Second, func() bool {
		heads, err := e.redis.Heads(context.Background(), []string{"g1"})
		return err == nil && float64(heads["g1"]) >= msgid
	})
	bob = e.login(0, "bob")
	synced := bob.call(map[string]any{"op": protocol.OpSync})
	groups, _ := synced["groups"].([]any)
	if len(groups) != 1 || groups[0].(map[string]any)["head"] != msgid {
		t.Fatalf("bob's sync after reconnecting: %v, want g1 at head %v", synced, msgid)
	}
	page := bob.call(map[string]any{"op": protocol.OpPull, "gid": "g1"})
	msgs, _ := page["msgs"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["msgid"] != msgid {
		t.Fatalf("bob's pull after reconnecting: %v, want message %v", page, msgid)
	}
}

// A later device of a user, which comes while the first one's presence is
// being written, relies on that write: when it fails, both are closed. It
// used to be served at once, and stayed unseen by the fan-out when the
// write failed.
func TestALaterDeviceIsClosedWithTheFirstWhenTheirPresenceFails(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	g := e.gws[0].g
	fail := &failPresence{key: "chat:{u:bob}:nodes", hold: make(chan struct{})}
	fail.on.Store(true)
	e.rc.AddHook(fail)
	first := e.login(0, "bob")
	waitFor(t, "the first device's presence write to be under way", 5*time.Second, fail.held.Load)
	second := e.login(0, "bob")
	waitFor(t, "the second device to be registered", 5*time.Second, func() bool {
		n := 0
		g.hub.each("bob", func(*conn) { n++ })
		return n == 2
	})
	close(fail.hold)
	for i, r := range []*raw{first, second} {
		ce, ops, err := r.awaitClose(2 * announceWithin)
		if ce == nil || ce.Code != websocket.StatusTryAgainLater {
			t.Errorf("device %d of bob, whose presence could not be written: frames %v, then %v; want a close %d",
				i+1, ops, err, websocket.StatusTryAgainLater)
		}
	}
	if n := g.Stats().PresenceRefused; n != 2 {
		t.Errorf("PresenceRefused = %d, want 2", n)
	}
}

// A user who reconnects while their old connection is being let go has
// their presence set again after the old one's clearing (see
// TestAReconnectRacingTheOldConnectionsEndStaysOnline). When that fails,
// the new connection, which the clearing left unseen by the fan-out, is
// closed to reconnect. It used to be left open, the failure only logged.
func TestAReconnectWhosePresenceCannotBeSetAgainIsClosed(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	fail := &failPresence{key: "chat:{u:alice}:nodes"}
	e.rc.AddHook(fail)
	fresh := e.reconnectDuringTheEnd("alice", func(*raw) {
		fail.on.Store(true) // from here on: the setting again after the clearing fails
	})
	ce, ops, err := fresh.awaitClose(2 * announceWithin)
	if ce == nil || ce.Code != websocket.StatusTryAgainLater {
		nodes, _ := e.redis.OnlineNodes(context.Background(), []string{"alice"})
		t.Fatalf("alice's new connection, her presence cleared by the old one's end and not set again (online on %v): frames %v, then %v; want a close %d",
			nodes["alice"], ops, err, websocket.StatusTryAgainLater)
	}
}

// presenceScene starts two gateways whose presence entries last ttl, with
// alice and bob on the first and carol on the second, members of g, and a
// hook, off, on the writes of bob's presence; bob and carol have g open
// and have been pushed first, alice's message.
func presenceScene(t *testing.T, ttl time.Duration) (e *env, fail *failPresence, alice, bob, carol *member, first int64) {
	e = newEnv(t, envOpts{gateways: 2, tune: func(c *Config) { c.PresenceTTL = ttl }})
	e.group("g", "alice", "bob", "carol")
	fail = &failPresence{key: "chat:{u:bob}:nodes"}
	e.rc.AddHook(fail)
	alice, bob, carol = e.connect(0, "alice", nil), e.connect(0, "bob", nil), e.connect(1, "carol", nil)
	ctx := context.Background()
	for _, m := range []*member{bob, carol} {
		if err := m.c.Open(ctx, "g"); err != nil {
			t.Fatal(err)
		}
	}
	first, err := alice.c.Send(ctx, "g", "first")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob and carol get the first message", 10*time.Second, func() bool {
		return len(bob.delivered("g")) == 1 && len(carol.delivered("g")) == 1
	})
	return e, fail, alice, bob, carol, first
}

// A user whose presence refreshes failed for longer than an entry lasts
// was offline for the fan-out meanwhile, and got no push of what was sent
// then. Once a refresh comes through, the gateway tells the connections to
// sync: with no later message in the group, nothing else would bring it.
func TestPresenceRefreshesFailedPastTheTTLAreFollowedByAResync(t *testing.T) {
	const ttl = 900 * time.Millisecond // refreshed every 300 ms
	e, fail, alice, bob, carol, first := presenceScene(t, ttl)
	ctx := context.Background()

	fail.on.Store(true)
	waitFor(t, "bob's presence expired", 10*time.Second, func() bool {
		nodes, err := e.redis.OnlineNodes(ctx, []string{"bob"})
		return err == nil && len(nodes["bob"]) == 0
	})
	// The fan-out trusts what it looked up for its presence TTL, counted
	// from the lookup: bob's last one was made before his entry expired.
	time.Sleep(consumers.DefaultPresenceTTL)
	unseen, err := alice.c.Send(ctx, "g", "while bob is offline for the fan-out")
	if err != nil {
		t.Fatal(err)
	}
	// Carol, online on the other gateway (this one's refreshes, one write
	// for all of its users, fail for alice too), is pushed it: the fan-out
	// has handled it, and bob was not among its recipients.
	waitFor(t, "carol pushed the message", 10*time.Second, func() bool { return len(carol.delivered("g")) == 2 })
	if got := bob.delivered("g"); len(got) != 1 {
		t.Fatalf("bob got %v while his presence had expired; the test needs the push to miss him", got)
	}
	fail.on.Store(false)

	waitFor(t, "bob gets the message sent while he was offline, without another one sent", 15*time.Second, func() bool {
		return len(bob.delivered("g")) == 2
	})
	bob.checkExactlyOnceInOrder(t, "g", []int64{first, unseen})
	if st := bob.c.Stats(); st.Resyncs != 1 || st.Reconnects != 0 {
		t.Errorf("bob: %+v; want one resync, on the same connection", st)
	}
}

// After the push route reconnects, Redis may have restarted and lost
// presence: the gateway writes its users' again and has them sync. When
// that write fails, the users stay offline for the fan-out until the next
// refresh; that refresh must announce them and have them sync, or what
// was sent in between waits for the group's next push. One resync, not
// two: one before the presence is written would come too early. The
// write is tried again soon, not at the next refresh.
func TestPresenceNotWrittenAgainAfterThePushRouteBrokeIsFollowedByAResync(t *testing.T) {
	const ttl = 30 * time.Second // refreshed every 10 s
	e, fail, alice, bob, carol, first := presenceScene(t, ttl)
	ctx := context.Background()

	// Just after a refresh, Redis loses bob's presence and the push route
	// breaks; writing it again fails.
	wrote := fail.wrote.Load()
	waitFor(t, "a refresh of bob's presence", ttl, func() bool { return fail.wrote.Load() > wrote })
	fail.on.Store(true)
	if err := e.rc.Del(ctx, fail.key).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := e.rc.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || n == 0 {
		t.Fatalf("killing the pub/sub connections: %d killed, %v", n, err)
	}
	waitFor(t, "bob's presence not written again", 10*time.Second, func() bool { return fail.failed.Load() > 0 })
	unseen, err := alice.c.Send(ctx, "g", "while bob is offline for the fan-out")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "carol pushed the message", 10*time.Second, func() bool { return len(carol.delivered("g")) == 2 })
	if got := bob.delivered("g"); len(got) != 1 {
		t.Fatalf("bob got %v while his presence was lost; the test needs the push to miss him", got)
	}
	fail.on.Store(false)

	// Tried again after 1 s, then 2, 4...: well before the next refresh,
	// 10 s after the one the test began at.
	waitFor(t, "bob gets the message sent while he was offline, without another one sent", 5*time.Second, func() bool {
		return len(bob.delivered("g")) == 2
	})
	bob.checkExactlyOnceInOrder(t, "g", []int64{first, unseen})
	if st := bob.c.Stats(); st.Resyncs != 1 || st.Reconnects != 0 {
		t.Errorf("bob: %+v; want one resync, on the same connection", st)
	}
}

// A user who reconnects while the old connection is being let go is unseen
// by the fan-out from the old one's clearing until their presence is set
// again, which may come after the check of the new connection's first
// sync has ended: what was sent in between was neither pushed nor covered.
// Once the presence is set again, the new connection is told to sync.
func TestAReconnectRacingTheOldConnectionsEndSyncsOnceSeenAgain(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 2})
	e.group("g", "alice", "bob", "carol")
	fail := &failPresence{key: "chat:{u:bob}:nodes", pass: make(chan struct{})}
	e.rc.AddHook(fail)
	alice, carol := e.connect(1, "alice", nil), e.connect(1, "carol", nil)
	ctx := context.Background()
	if err := carol.c.Open(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	fresh := e.reconnectDuringTheEnd("bob", func(fresh *raw) {
		if f := fresh.call(map[string]any{"op": protocol.OpSync}); f["op"] != protocol.OpSynced {
			t.Errorf("bob's first sync on the new connection: %v", f)
		}
		e.waitSyncChecked(0, "bob")
		fail.on.Store(true) // from here on: the setting again after the clearing waits for pass
	})
	waitFor(t, "bob's presence cleared by the old connection's end", 5*time.Second, func() bool {
		nodes, err := e.redis.OnlineNodes(ctx, []string{"bob"})
		return err == nil && len(nodes["bob"]) == 0
	})
	unseen, err := alice.c.Send(ctx, "g", "while bob is unseen")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "carol pushed the message", 10*time.Second, func() bool { return len(carol.delivered("g")) == 1 })
	close(fail.pass)

	for {
		f, err := fresh.tryRead(5 * time.Second)
		if err != nil {
			t.Fatalf("bob's new connection, unseen while msgid %d was sent: %v; want a resync once his presence is set again", unseen, err)
		}
		if f["op"] == protocol.OpPush {
			t.Fatalf("bob was pushed %v while his presence was cleared; the test needs the push to miss him", f)
		}
		if f["op"] == protocol.OpResync {
			if f["reason"] != protocol.ResyncPresence {
				t.Fatalf("resync %v, want reason %q", f, protocol.ResyncPresence)
			}
			break
		}
	}
	f := fresh.call(map[string]any{"op": protocol.OpSync})
	groups, _ := f["groups"].([]any)
	if len(groups) != 1 || groups[0].(map[string]any)["head"] != float64(unseen) {
		t.Fatalf("bob's sync after the resync: %v; want g's head at %d", f, unseen)
	}
}

// Redis loses its data without a restart (a FLUSHALL, an eviction): the
// connections and the push route stay up, and the refreshes write the
// presence again within a third of its TTL without calling it lapsed, so
// what the fan-out handled meanwhile was pushed to nobody and nobody was
// told. The lease on the node's name, renewed more often, is gone too: the
// renewal that finds it gone has the presence written again and the
// connections told to sync.
func TestPresenceWipedWithoutARestartIsFollowedByAResync(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) {
		c.PresenceTTL = 30 * time.Second // refreshed every 10 s
		c.NodeLease = 900 * time.Millisecond
	}})
	e.group("g", "alice", "bob")
	alice, bob := e.connect(0, "alice", nil), e.connect(0, "bob", nil)
	ctx := context.Background()
	if err := bob.c.Open(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	first, err := alice.c.Send(ctx, "g", "first")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "bob gets the first message", 10*time.Second, func() bool { return len(bob.delivered("g")) == 1 })
	if err := e.rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The fan-out trusts what it looked up for its presence TTL: past it,
	// bob is offline for it until his presence is written again.
	time.Sleep(consumers.DefaultPresenceTTL)
	unseen, err := alice.c.Send(ctx, "g", "after the wipe")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(bob.delivered("g")) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("bob (online throughout) got %v of g in 20 s after message %d; stats %+v", bob.delivered("g"), unseen, bob.c.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	bob.checkExactlyOnceInOrder(t, "g", []int64{first, unseen})
}
