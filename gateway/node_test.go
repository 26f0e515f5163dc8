package gateway

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Two gateways under one node name would share its push channel and take
// each other's users offline. A second one is refused while the first
// runs; one restarted after a kill waits out the dead one's lease; one
// restarted after a clean stop takes the name at once.
func TestANodeNameHoldsOneRunningGateway(t *testing.T) {
	const lease = 400 * time.Millisecond
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
	if _, err := e.redis.HoldNode(ctx, "gw-killed", "killed-host/1/00", lease); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	restarted, _, stop := run("gw-killed")
	time.Sleep(lease / 2)
	if restarted.Ready() {
		t.Fatal("the restarted gateway was ready while the killed one's lease lasted")
	}
	waitFor(t, "the restarted gateway to take the name once the lease ended", 10*lease, restarted.Ready)
	if took := time.Since(start); took < lease/2 {
		t.Fatalf("ready after %v, before the killed one's lease of %v ended", took, lease)
	}

	// A gateway that stops lets the name go.
	stop()
	waitFor(t, "the stopped gateway to let the name go", 5*time.Second, func() bool {
		holder, err := e.redis.HoldNode(ctx, "gw-killed", "next/2/00", time.Minute)
		return err == nil && holder == "next/2/00"
	})
}
