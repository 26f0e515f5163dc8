package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// Two gateways under one node name would share its push channel and take
// each other's users offline. A second one is refused while the first
// runs; one restarted after a kill waits out the dead one's lease; one
// restarted after a clean stop takes the name at once.
func TestANodeNameHoldsOneRunningGateway(t *testing.T) {
	const lease = time.Second // long enough for the checks within it on a loaded machine
	short := func(c *Config) { c.NodeLease = lease }
	e := newEnv(t, envOpts{gateways: 1, tune: short})
	first := e.gws[0].g
	waitFor(t, "the first gateway to be ready", 10*time.Second, first.Ready)

	run := func(node string) (*Gateway, <-chan error, context.CancelFunc) {
		cfg := Config{Redis: e.redis, Producer: e.prod, History: e.hist, Secret: []byte(testSecret),
			Node: node, NodeLease: lease, Logger: e.base.Logger}
		g, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done, ended := make(chan error, 1), make(chan struct{})
		go func() { defer close(ended); done <- g.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-ended })
		return g, done, cancel
	}

	second, done, _ := run(first.Node())
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "held by another running gateway") || !strings.Contains(err.Error(), "CHAT_NODE_ID") {
			t.Fatalf("a second gateway under %q: %v", first.Node(), err)
		}
	case <-time.After(10 * lease):
		t.Fatalf("a second gateway under %q still runs after %v", first.Node(), 10*lease)
	}
	if second.Ready() || !first.Ready() {
		t.Fatalf("ready: first %v, second %v; want the first only", first.Ready(), second.Ready())
	}

	// A killed gateway leaves its lease behind until it ends.
	ctx := context.Background()
	leased := time.Now() // the lease ends no sooner than lease after this
	if _, _, err := e.redis.HoldNode(ctx, "gw-killed", "killed-host/1/00", lease); err != nil {
		t.Fatal(err)
	}
	restarted, _, stop := run("gw-killed")
	waitFor(t, "the restarted gateway to take the name once the lease ended", 10*lease, restarted.Ready)
	if took := time.Since(leased); took < lease-lease/20 {
		t.Fatalf("ready %v after the killed one's lease of %v was written: before it ended", took, lease)
	}

	// A gateway that stops lets the name go.
	stop()
	waitFor(t, "the stopped gateway to let the name go", 5*time.Second, func() bool {
		holder, _, err := e.redis.HoldNode(ctx, "gw-killed", "next/2/00", time.Minute)
		return err == nil && holder == "next/2/00"
	})
}

// A gateway that stopped running lets its name go at once, while its
// connections still drain; a gateway restarted under the name may then
// have the same users. The old one closing its connections must not take
// them offline there: their pushes would go nowhere until the next refresh.
func TestAStoppedGatewayDoesNotTakeOfflineTheUsersOfItsSuccessor(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.NodeLease = time.Second }})
	old := e.gws[0]
	waitFor(t, "the first gateway to be ready", 10*time.Second, old.g.Ready)
	first := e.login(0, "alice")
	go func() { // answers the close handshake
		for {
			if _, _, err := first.ws.Read(context.Background()); err != nil {
				return
			}
		}
	}()

	waitFor(t, "alice to be registered", 5*time.Second, func() bool { return old.g.Stats().Conns == 1 })
	old.cancel() // Run ends: the name is let go, the connection stays
	<-old.done
	// It hears no pushes any more: pushes for alice go nowhere else.
	if nodes, err := e.redis.OnlineNodes(context.Background(), []string{"alice"}); err != nil || len(nodes["alice"]) != 0 {
		t.Fatalf("alice is online on %v (%v) after her gateway stopped running", nodes["alice"], err)
	}
	next := e.addGateway(1, func(c *Config) { c.Node, c.NodeLease = old.g.Node(), time.Second })
	waitFor(t, "the successor to take the name", 10*time.Second, next.g.Ready)
	e.login(1, "alice")
	waitFor(t, "alice to be registered there", 5*time.Second, func() bool { return next.g.Stats().Conns == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := old.g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	nodes, err := e.redis.OnlineNodes(ctx, []string{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes["alice"]) != 1 || nodes["alice"][0] != old.g.Node() {
		t.Fatalf("alice is connected to the successor under %q and online on %v", old.g.Node(), nodes["alice"])
	}
}

// Until Run holds the node's name and gets its pushes (as while a killed
// gateway's lease on the name lasts), nobody reads the pushes published
// for its name: a client it took would miss them. It refuses WebSockets
// until then, saying to retry.
func TestAGatewayRefusesWebSocketsUntilItGetsItsPushes(t *testing.T) {
	e := newEnv(t, envOpts{})
	g, err := New(Config{Redis: e.redis, Producer: e.prod, History: e.hist, Secret: []byte(testSecret),
		Node: "starting", Logger: e.base.Logger})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	dial := func() (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws?token="+e.token("alice"), nil)
	}
	if ws, resp, err := dial(); err == nil {
		ws.CloseNow()
		t.Fatal("a gateway took a WebSocket before it got its pushes")
	} else if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a WebSocket to a gateway not ready: %v %v, want 503 with Retry-After", resp, err)
	} else {
		var body map[string]string
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if body["code"] != string(protocol.CodeUnavailable) || !strings.Contains(body["message"], "retry") {
			t.Fatalf("the refusal's body: %v, want unavailable saying to retry", body)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the gateway to get its pushes", 10*time.Second, g.Ready)
	ws, _, err := dial()
	if err != nil {
		t.Fatalf("a WebSocket once the gateway gets its pushes: %v", err)
	}
	ws.CloseNow()
}

// A gateway whose lease could not be renewed until it ended (Redis down)
// is not ready: /readyz said 200 throughout, while it could neither keep
// its name nor register a connection. Ready again once Redis is back.
func TestAGatewayIsNotReadyOnceItsLeaseRanOut(t *testing.T) {
	const lease = time.Second
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.NodeLease = lease }})
	g := e.gws[0].g
	waitFor(t, "the gateway to be ready", 10*time.Second, g.Ready)
	if err := e.redisSrv.Stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gateway to be unready with Redis down", 10*lease, func() bool { return !g.Ready() })
	if err := e.redisSrv.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gateway to be ready again", 20*time.Second, g.Ready)
}
