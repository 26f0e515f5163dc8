package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"
)

// A gateway's node name (Config.Node) routes its pushes and marks its users'
// presence, so it must name one running gateway. Two under one name share
// the push channel, and each takes the other's users offline when its own
// last connection of them closes. A gateway therefore holds a lease on its
// name in Redis while it runs.

// newInstance names this process's claim: host, pid and a random part, so
// that a log says which process holds a name.
func newInstance() string {
	b := make([]byte, 4)
	rand.Read(b)
	h, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", h, os.Getpid(), hex.EncodeToString(b))
}

// holdNode takes the lease on the node's name. A gateway killed without
// releasing it leaves a lease that ends within NodeLease, so a restart under
// the same name waits for that; a lease still renewed after twice NodeLease
// belongs to a gateway that runs, and Run fails saying so.
func (g *Gateway) holdNode(ctx context.Context) error {
	giveUp := time.Now().Add(2 * g.cfg.NodeLease)
	for warned := false; ; warned = true {
		asked := g.since() // the monotonic clock: a step of the wall clock moves no lease
		holder, _, err := g.cfg.Redis.HoldNode(ctx, g.cfg.Node, g.instance, g.cfg.NodeLease)
		if err != nil {
			return fmt.Errorf("gateway: taking the node name %q: %w", g.cfg.Node, err)
		}
		if holder == g.instance {
			g.leaseEnds.Store(int64(asked + g.cfg.NodeLease))
			return nil
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("gateway: the node name %q is held by another running gateway (%s); give each gateway its own CHAT_NODE_ID, or leave it unset (hostname-pid)",
				g.cfg.Node, holder)
		}
		if !warned {
			g.log.Warn("another gateway holds this node name; waiting for its lease to end, as it does when a gateway was killed",
				"holder", holder, "gives_up_in", time.Until(giveUp).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(g.cfg.NodeLease / 5):
		}
	}
}

// keepNode renews the lease every third of NodeLease until ctx ends. It
// logs an error when another gateway took the name meanwhile (the lease ran
// out while Redis was unreachable, or Redis lost it), and takes it back once
// that one lets it go. A lease found gone has the presence written again
// and the connections told to sync (refreshPresence).
func (g *Gateway) keepNode(ctx context.Context) {
	t := time.NewTicker(g.cfg.NodeLease / 3)
	defer t.Stop()
	lost := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		asked := g.since() // the monotonic clock: a step of the wall clock moves no lease
		holder, held, err := g.cfg.Redis.HoldNode(ctx, g.cfg.Node, g.instance, g.cfg.NodeLease)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				g.log.Warn("renewing the node name's lease failed; retrying", "err", err)
			}
		case holder != g.instance && holder != lost:
			g.log.Error("another gateway runs under this node name: pushes to the users of both are unreliable; give each gateway its own CHAT_NODE_ID",
				"holder", holder)
			lost = holder
		case holder == g.instance:
			lost = ""
			g.leaseEnds.Store(int64(asked + g.cfg.NodeLease))
			if !held {
				// Redis lost the lease, and likely the presence written
				// beside it (a FLUSHALL, an eviction), with no restart to
				// break the push route: the fan-outs may have taken this
				// node's users for offline since.
				g.log.Warn("the node name's lease was gone from Redis; writing the users' presence again and telling their connections to sync")
				g.presenceLost.Store(true)
				select {
				case g.presenceKick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// releaseNode takes this node's users offline (it hears no pushes from
// now on) and ends the lease, so that a gateway restarted under the same
// name takes it at once. From then on the presence under the name may be
// the successor's, for the same users: the connections still draining
// here leave it alone rather than take them offline there.
func (g *Gateway) releaseNode() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g.nodeMu.Lock()
	g.released = true
	uids := g.hub.uids()
	g.nodeMu.Unlock()
	if err := g.cfg.Redis.SetOffline(ctx, g.cfg.Node, uids); err != nil {
		g.log.Debug("cannot clear presence; it expires by itself", "users", len(uids), "err", err)
	}
	if err := g.cfg.Redis.ReleaseNode(ctx, g.cfg.Node, g.instance); err != nil {
		g.log.Debug("releasing the node name failed; its lease ends by itself", "err", err)
	}
}
