package deployment

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A role's Redis restarted without its data under it gets its id back
// once the role reconnects; one that comes back as another deployment's
// stops the role.
func TestTheWatcherRestoresTheIdAndStopsOnAnother(t *testing.T) {
	ctx := context.Background()
	k, s := kafkaOf(t), realRedis(t)
	id, err := Check(ctx, s.cfg(k))
	if err != nil {
		t.Fatal(err)
	}
	w := &Watcher{Redis: s.r, ID: id, Addrs: []string{s.addr}, Log: quiet}
	s.rc.AddHook(w.Hook())
	done := make(chan error, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { done <- w.Run(wctx) }()

	// A loss of data: the connections drop, and the client dials again.
	s.rc.FlushAll(ctx)
	s.rc.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "no")
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.rc.Ping(ctx) // dials again
		if held, _ := s.r.Deployment(ctx); held == id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Redis that lost its data did not get its id back within 5 s of the reconnect")
		}
		time.Sleep(50 * time.Millisecond)
	}

	s.rc.Set(ctx, "chat:deployment", "0ther", 0)
	s.rc.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "no")
	s.rc.Ping(ctx)
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotTheDeploymentsRedis) {
			t.Fatalf("the watcher on a Redis of another id: %v, want ErrNotTheDeploymentsRedis", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher went on for 5 s on a Redis of another deployment's id")
	}
}
