package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
)

func reserve(t *testing.T, r *Redis, gid string, limit int, known map[string]bool, uids ...string) ([]bool, error) {
	t.Helper()
	fresh, err := r.ReserveJoins(context.Background(), gid, uids, limit, known, time.Minute)
	if err != nil && !errors.Is(err, ErrGroupFull) {
		t.Fatalf("ReserveJoins %v: %v", uids, err)
	}
	return fresh, err
}

func wantFull(t *testing.T, what string, err error, members int) {
	t.Helper()
	var full *FullError
	if !errors.As(err, &full) || full.Members != members {
		t.Errorf("%s: %v, want the group full at %d members", what, err, members)
	}
}

// A group's place is reserved before its join is written and counted with
// the joined members until the projector has the join: two adds at once,
// or an add within the projector's lag of another, cannot pass the limit.
// A place is counted once: a reservation whose join is projected, a join
// replayed, a re-join of a member whose leave is not projected yet.
func testReserveJoins(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	applyMembers(t, r, join("g", "a", 1), join("g", "b", 1), join("g", "c", 1), leave("g", "c", 2))

	// a and b joined, c left: two places of four are free.
	if fresh, err := reserve(t, r, "g", 4, nil, "d"); err != nil || !slicesEqual(fresh, []bool{true}) {
		t.Fatalf("reserve d: %v %v", fresh, err)
	}
	_, err := reserve(t, r, "g", 4, nil, "e", "f")
	wantFull(t, "e and f with d reserved", err, 3)
	if ok, _ := r.Joining(ctx, "g", "e"); ok {
		t.Errorf("e reserved by a refused call")
	}
	// A retry of d's add finds it reserved: no second join, no second place.
	if fresh, err := reserve(t, r, "g", 3, nil, "d"); err != nil || !slicesEqual(fresh, []bool{false}) {
		t.Fatalf("d again: %v %v", fresh, err)
	}
	if ok, err := r.Joining(ctx, "g", "d"); !ok || err != nil {
		t.Errorf("Joining d = %v, %v", ok, err)
	}
	// Projected (and replayed), d counts as joined and its reservation no more.
	applyMembers(t, r, join("g", "d", 3))
	applyMembers(t, r, join("g", "a", 1), join("g", "d", 3))
	if _, err := reserve(t, r, "g", 4, nil, "e"); err != nil {
		t.Fatalf("e with d projected: %v", err)
	}
	_, err = reserve(t, r, "g", 4, nil, "f")
	wantFull(t, "f in a full group", err, 4)
	// A named member twice is one join.
	if fresh, _ := reserve(t, r, "g", 6, nil, "f", "f"); !slicesEqual(fresh, []bool{true, false}) {
		t.Errorf("f named twice: %v", fresh)
	}
	if err := r.ClearJoining(ctx, "g", "e", "f"); err != nil {
		t.Fatal(err)
	}

	// A re-join of a with its leave written but not projected is one place.
	if _, err := reserve(t, r, "g", 3, nil, "a"); err != nil {
		t.Errorf("a back, counted as a member already: %v", err)
	}
	applyMembers(t, r, leave("g", "a", 4)) // a's leave projected, the re-join not yet
	_, err = reserve(t, r, "g", 3, nil, "x")
	wantFull(t, "x with a's re-join reserved", err, 3)
	// A leave projected frees its place; a reservation dropped frees its.
	applyMembers(t, r, leave("g", "b", 5))
	if err := r.MarkLeaving(ctx, "g", "a", 1, 4, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(t, r, "g", 3, nil, "x", "y"); err != nil {
		t.Errorf("x and y with b gone and a's re-join dropped: %v", err)
	}
	// A leave noted, not yet projected, frees its place at once; a note
	// of an earlier stretch of the member frees none.
	if err := r.MarkLeaving(ctx, "g", "d", 2, 6, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err = reserve(t, r, "g", 3, nil, "z")
	wantFull(t, "z with a leave of d's earlier stretch noted", err, 3)
	if err := r.MarkLeaving(ctx, "g", "d", 3, 6, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := reserve(t, r, "g", 3, nil, "z"); err != nil {
		t.Errorf("z with d's leave noted: %v", err)
	}

	// The caller's own count (chatctl's, read from chat.members) counts
	// when the projection has fewer.
	three := map[string]bool{"k1": true, "k2": true, "k3": true}
	_, err = reserve(t, r, "g2", 3, three, "p")
	wantFull(t, "p with 3 known", err, 3)
	if _, err := reserve(t, r, "g2", 3, map[string]bool{"k1": true}, "p"); err != nil {
		t.Errorf("p with 1 known: %v", err)
	}
	// A reservation of a join the caller counts (p's, written and read
	// back) is no second place; one it does not count is.
	if _, err := reserve(t, r, "g2", 3, map[string]bool{"k1": true, "p": true}, "q"); err != nil {
		t.Errorf("q with k1 and p known, p reserved: %v", err)
	}
	_, err = reserve(t, r, "g2", 3, map[string]bool{"k1": true, "k2": true}, "s")
	wantFull(t, "s with k1 and k2 known, p and q reserved", err, 4)
}

// Concurrent adds of one member each take exactly the places left.
func testReserveJoinsAtOnce(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	applyMembers(t, r, join("g", "a", 1))
	const limit, callers = 5, 20
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		reserved int
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.ReserveJoins(context.Background(), "g", []string{fmt.Sprint("u", i)}, limit, nil, time.Minute)
			switch {
			case err == nil:
				mu.Lock()
				reserved++
				mu.Unlock()
			case !errors.Is(err, ErrGroupFull):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if reserved != limit-1 {
		t.Errorf("%d callers reserved a place, want %d (%d members at most, 1 joined)", reserved, limit-1, limit)
	}
}

// A reservation whose join was never written (its caller crashed) expires
// and frees its place; the key goes with its last entry.
func testReserveJoinsExpire(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	if _, err := r.ReserveJoins(ctx, "g", []string{"a"}, 1, nil, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, err := r.ReserveJoins(ctx, "g", []string{"b"}, 1, nil, time.Minute)
	wantFull(t, "b with a reserved", err, 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = r.ReserveJoins(ctx, "g", []string{"b"}, 1, nil, time.Minute)
		if err == nil || !errors.Is(err, ErrGroupFull) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("b after a's reservation expired: %v", err)
	}
	if ok, _ := r.Joining(ctx, "g", "a"); ok {
		t.Errorf("a still joining after its reservation expired")
	}
	if ttl, err := c.PTTL(ctx, joiningKey("g")).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("the reservations' key expires in %v (%v), want within a minute", ttl, err)
	}
}

// A group is known once it has a member, joined or left, or a join
// reserved that is neither projected nor expired nor dropped yet: a group
// just created is known before the member projector applies its joins.
func testGroupKnown(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	known := func(gid string) bool {
		t.Helper()
		ok, err := r.GroupKnown(ctx, gid)
		if err != nil {
			t.Fatalf("GroupKnown %s: %v", gid, err)
		}
		return ok
	}
	applyMembers(t, r, join("left", "a", 1), leave("left", "a", 2))
	for _, gid := range []string{"new", "short"} {
		if known(gid) {
			t.Fatalf("%s known before any join", gid)
		}
	}
	if _, err := r.ReserveJoins(ctx, "new", []string{"a", "b"}, 10, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReserveJoins(ctx, "short", []string{"a"}, 10, nil, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !known("new") || !known("short") || !known("left") || known("other") {
		t.Fatalf("known: new %v, short %v, left %v, other %v; want true, true, true, false", known("new"), known("short"), known("left"), known("other"))
	}
	if err := r.ClearJoining(ctx, "new", "a", "b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past short's expiry
	if known("new") || known("short") {
		t.Errorf("known after their joins were dropped (new %v) or expired (short %v)", known("new"), known("short"))
	}
}

// A reservation renewed while its join is written outlives its first
// expiry, and the key with it; one dropped meanwhile is not brought back.
func testExtendJoining(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	if _, err := r.ReserveJoins(ctx, "g", []string{"a", "b"}, 2, nil, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := r.ClearJoining(ctx, "g", "b"); err != nil {
		t.Fatal(err)
	}
	if err := r.ExtendJoining(ctx, "g", []string{"a", "b"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl, err := c.PTTL(ctx, joiningKey("g")).Result(); err != nil || ttl < 30*time.Second {
		t.Errorf("the reservations' key expires in %v (%v), want about a minute", ttl, err)
	}
	time.Sleep(100 * time.Millisecond) // past the first expiry: time must pass
	if ok, err := r.Joining(ctx, "g", "a"); !ok || err != nil {
		t.Errorf("a renewed: Joining = %v, %v; want true", ok, err)
	}
	if ok, _ := r.Joining(ctx, "g", "b"); ok {
		t.Errorf("b dropped, then renewed: Joining = true; want it left dropped")
	}
	_, err := r.ReserveJoins(ctx, "g", []string{"c", "d"}, 2, nil, time.Minute)
	wantFull(t, "c and d with a renewed", err, 1)
}

// The group's leaves, which every ReserveJoins reads, hold about those
// within their hold while members keep leaving, each within the hold of
// the one before: the leaves past their expiry are taken out now and
// then, and a leave held longer stays.
func testMarkLeavingPrunes(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	if err := r.MarkLeaving(ctx, "g", "long", 1, 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	// At most hold/gap+1 leaves are within their hold at once: the walks
	// keep at most that many, and the hash passes twice that and 16
	// (with long and #kept) before the next.
	const hold, gap, leaves = 20 * time.Millisecond, 5 * time.Millisecond, 100
	const most = 2*(hold/gap+1+1) + 16 + 2
	for n := range leaves {
		if err := r.MarkLeaving(ctx, "g", fmt.Sprint("u", n), 1, 2, hold); err != nil {
			t.Fatal(err)
		}
		notes, err := c.HGetAll(ctx, leavesKey("g")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if notes["long"] == "" || notes[fmt.Sprint("u", n)] == "" {
			t.Fatalf("leave %d: %v noted, want long and u%d among them", n, notes, n)
		}
		if len(notes) > int(most) {
			t.Fatalf("leave %d: %d leaves noted, want at most %d: those past their hold of %v stay", n, len(notes), most, hold)
		}
		time.Sleep(gap) // the next leave comes within the hold of this one
	}
	if ttl, err := c.PTTL(ctx, leavesKey("g")).Result(); err != nil || ttl < 50*time.Second || ttl > time.Minute {
		t.Errorf("the leaves' key expires in %v (%v), want with long's note, in about a minute", ttl, err)
	}
	// The leave kept still frees its place.
	applyMembers(t, r, join("g", "long", 1))
	if _, err := reserve(t, r, "g", 1, nil, "x"); err != nil {
		t.Errorf("x with the leave of long noted: %v", err)
	}
}

// firstRun runs fn as the client sends its first run of script, once,
// before the run goes out; an error of fn is the run's, not sent. What fn
// sends itself goes through.
type firstRun struct {
	script *redis.Script
	fn     func(ctx context.Context) error
	done   atomic.Bool
}

func (h *firstRun) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *firstRun) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *firstRun) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if cmd.Name() == "evalsha" && len(args) > 1 && args[1] == h.script.Hash() && h.done.CompareAndSwap(false, true) {
			if err := h.fn(ctx); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// A reservation of a join that the caller counts (known) is no second
// place however late it was taken: a gateway's add of x that reserves it
// just before chatctl's count, with x in chatctl's members (read from
// chat.members before x's leave, say), is counted once, as one taken
// earlier is.
func testReserveJoinsKnownLate(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	c.AddHook(&firstRun{script: reserveScript, fn: func(ctx context.Context) error {
		if _, err := r.ReserveJoins(ctx, "g", []string{"x"}, 3, nil, time.Minute); err != nil {
			t.Errorf("the gateway's add of x: %v", err)
		}
		return nil
	}})
	if _, err := reserve(t, r, "g", 3, map[string]bool{"k": true, "x": true}, "p"); err != nil {
		t.Errorf("p with k and x known, x reserved just before: %v", err)
	}
	if ok, err := r.Joining(context.Background(), "g", "x"); !ok || err != nil {
		t.Errorf("Joining x = %v, %v; want the gateway's reservation held", ok, err)
	}
}

// stall holds a run (firstRun's fn) until release is closed or the run's
// context is done, and counts it while held.
type stall struct {
	running atomic.Int32
	entered chan struct{} // closed once the run is held
	release chan struct{}
}

func (h *stall) hold(ctx context.Context) error {
	h.running.Add(1)
	defer h.running.Add(-1)
	close(h.entered)
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Once stop returns, no renewal of HoldJoins runs but stop's own: one
// under way (a slow Redis) is done before, or it could land after the
// caller has moved on. Stop's renewal holds the joins for hold more.
func testHoldJoinsStop(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	if _, err := r.ReserveJoins(ctx, "g", []string{"a", "b"}, 2, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	stall := &stall{entered: make(chan struct{}), release: make(chan struct{})}
	defer func() {
		// A renewal still held ends before the test does, its client with it.
		close(stall.release)
		for deadline := time.Now().Add(10 * time.Second); stall.running.Load() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}()
	c.AddHook(&firstRun{script: extendScript, fn: stall.hold})
	const hold = 30 * time.Millisecond
	stop := r.HoldJoins(ctx, "g", []string{"a", "b"}, hold, func(err error) {
		t.Errorf("renewal: %v", err) // a renewal stop cancelled is no failure
	})
	select {
	case <-stall.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal within 10s of a hold of 30ms")
	}
	before := time.Now()
	stop()
	if n := stall.running.Load(); n != 0 {
		t.Errorf("%d renewals under way after stop returned", n)
	}
	for _, uid := range []string{"a", "b"} {
		exp, err := c.ZScore(ctx, joiningKey("g"), uid).Result()
		if err != nil || int64(exp) < before.Add(hold).UnixMilli() {
			t.Errorf("%s held until %v (%v) after stop, want at least %v", uid, int64(exp), err, before.Add(hold).UnixMilli())
		}
	}
}

// A removal of thousands of members, each leave within the hold of the
// others, walks the group's leaves a few times, not once a leave: walked
// every time, 10,000 leaves took 36 s of Redis here, against 1 s.
func TestManyLeavesWalkTheirNotesAFewTimes(t *testing.T) {
	srv := testserver.NewRedis(t)
	c := newServerClient(t, srv)
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const leaves = 2000
	for n := range leaves {
		if err := r.MarkLeaving(ctx, "g", fmt.Sprint("u", n), 1, 2, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var walks int
	for _, line := range strings.Split(stats, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hgetall:calls="); ok {
			walks, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		}
	}
	if walks == 0 || walks > 20 {
		t.Fatalf("%d leaves walked the group's leaves %d times, want a few (at most 20)", leaves, walks)
	}
	if n, err := c.HLen(ctx, leavesKey("g")).Result(); err != nil || n != leaves+1 {
		t.Fatalf("%d leaves within their hold: %d noted (with #kept) (%v), want %d", leaves, n, err, leaves+1)
	}
}
