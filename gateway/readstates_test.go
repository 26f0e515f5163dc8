package gateway

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// readStatesRedis returns a store on a new redis-server that holds groups
// g0, g1, ... of the given sizes.
func readStatesRedis(t *testing.T, sizes ...int) *store.Redis {
	t.Helper()
	srv := testserver.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	r, err := store.NewRedis(c, store.RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var events []schema.Member
	for g, n := range sizes {
		for i := range n {
			events = append(events, schema.Member{Gid: fmt.Sprint("g", g), Uid: fmt.Sprint("u", i), Op: schema.OpJoin, Pos: -1})
		}
	}
	if err := r.ApplyMembers(context.Background(), events); err != nil {
		t.Fatal(err)
	}
	return r
}

// gone reports whether nothing holds what p points to any more.
func gone[T any](p weak.Pointer[T]) bool {
	runtime.GC()
	runtime.GC()
	return p.Value() == nil
}

// Asks for a group's read state while it loads wait for that load: 32
// asks at once on a group not loaded each loaded it, which at 10,000
// members is 2.7 MiB out of Redis each.
func TestReadStatesLoadAGroupOnceForAsksAtOnce(t *testing.T) {
	r := readStatesRedis(t, 5)
	var c readStates
	var loads atomic.Int64
	check := func() error { // before each load; a slow load
		loads.Add(1)
		time.Sleep(50 * time.Millisecond)
		return nil
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	states := make([]*store.ReadState, 32)
	for i := range states {
		wg.Go(func() {
			<-start
			st, err := c.get(context.Background(), r, "g0", check)
			if err != nil {
				t.Error(err)
			}
			states[i] = st
		})
	}
	close(start)
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Errorf("32 asks at once loaded the group's read state %d times; want once", n)
	}
	distinct := map[*store.ReadState]bool{}
	for _, st := range states {
		distinct[st] = true
	}
	if len(distinct) != 1 || states[0] == nil || len(states[0].Members) != 5 {
		t.Errorf("the asks got %d different states; want the one load's, of 5 members", len(distinct))
	}
}

// A read state is no longer held once stale: a group of 10,000 members
// held 4.2 MiB until 4,096 groups had been loaded.
func TestReadStatesDropAStateOnceStale(t *testing.T) {
	r := readStatesRedis(t, 5)
	var c readStates
	st, err := c.get(context.Background(), r, "g0", func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	p := weak.Make(st)
	st = nil
	time.Sleep(readStateFresh + 100*time.Millisecond)
	if !gone(p) {
		t.Errorf("a read state stale for 100 ms is still held")
	}
	runtime.KeepAlive(&c) // the cache, not only what it holds, outlives the check
}

// The states held are bounded by their members, not by their groups: a
// group of 10,000 members costs as much as 10,000 of one. The oldest go
// first, and a group larger than the bound is loaded for each ask, not
// held.
func TestReadStatesHoldAtMostTheirBoundOfMembers(t *testing.T) {
	r := readStatesRedis(t, 40, 40, 40, 40, 150)
	c := readStates{maxMembers: 100}
	var loads atomic.Int64
	check := func() error { loads.Add(1); return nil }
	for _, gid := range []string{"g0", "g1", "g2", "g3", "g4"} {
		if _, err := c.get(context.Background(), r, gid, check); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		held := c.members
		c.mu.Unlock()
		if held > 100 {
			t.Fatalf("after loading %s, %d members held; want at most 100", gid, held)
		}
	}
	// What the cache holds, not what the collector has freed: a stopped
	// timer's closure may keep a dropped state reachable for a moment.
	c.mu.Lock()
	var holding []string
	for el := c.held.Front(); el != nil; el = el.Next() {
		holding = append(holding, el.Value.(*readStateLoad).gid)
	}
	_, g0 := c.loads["g0"]
	_, g1 := c.loads["g1"]
	_, g4 := c.loads["g4"]
	c.mu.Unlock()
	if fmt.Sprint(holding) != "[g2 g3]" || g0 || g1 || g4 {
		t.Errorf("the cache holds %v (g0 %v, g1 %v, g4 %v); want g2 and g3 (80 members) only: g0 and g1 dropped for them, g4 (150 members) never held", holding, g0, g1, g4)
	}
	before := loads.Load()
	if _, err := c.get(context.Background(), r, "g4", check); err != nil || loads.Load() != before+1 {
		t.Errorf("asking again for g4 (150 members): %v, %d loads; want it loaded again", err, loads.Load()-before)
	}
}
