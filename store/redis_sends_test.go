package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/schema"
)

// testSendClaims covers the gateway's send claims, above all a send that
// was produced twice (its claim lapsed while the first produce was in
// flight): every answer names the first record, the one the persister and
// the fan-out keep.
func testSendClaims(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	applyMembers(t, r, join("g", "u", -1), join("g", "leaver", -1), leave("g", "leaver", 3))
	attempts := map[string]string{} // cmid -> its newest claim's attempt
	begin := func(cmid string, want SendState) int64 {
		t.Helper()
		c, err := r.BeginSend(ctx, "g", "u", cmid, time.Second, nil)
		if err != nil || c.State != want || c.Member.State != MemberJoined || (c.Attempt != "") != (want == SendClaimed) {
			t.Fatalf("BeginSend(%s) = %+v, %v; want a joined member, state %v", cmid, c, err, want)
		}
		if c.Attempt != "" {
			attempts[cmid] = c.Attempt
		}
		return c.MsgID
	}

	finish := func(cmid string, msgid, want int64) {
		t.Helper()
		got, err := r.FinishSend(ctx, "g", "u", cmid, attempts[cmid], msgid, time.Hour)
		if err != nil || got != want {
			t.Fatalf("FinishSend(%s, %d) = %d, %v; want %d", cmid, msgid, got, err, want)
		}
	}

	// Only a joined member gets a claim.
	for who, want := range map[string]MemberState{"stranger": MemberNone, "leaver": MemberLeft} {
		cl, err := r.BeginSend(ctx, "g", who, "x", time.Second, nil)
		if err != nil || cl.Member.State != want || cl.MsgID != -1 {
			t.Fatalf("BeginSend by %s = %+v, %v; want membership state %v", who, cl, err, want)
		}
		if n := c.Exists(ctx, sendKey("g", who, "x")).Val(); n != 0 {
			t.Fatalf("BeginSend by %s left a claim", who)
		}
	}

	// A send accepted before its sender left is still done: a resend of it
	// gets the first send's msgid, not a refusal.
	if _, err := r.FinishSend(ctx, "g", "leaver", "before", "a1", 2, time.Hour); err != nil {
		t.Fatal(err)
	}
	if cl, err := r.BeginSend(ctx, "g", "leaver", "before", time.Second, nil); err != nil || cl.State != SendDone || cl.MsgID != 2 || cl.Member.State != MemberLeft {
		t.Fatalf("BeginSend by a leaver of a send accepted before = %+v, %v; want done with msgid 2, membership left", cl, err)
	}

	// A slow produce keeps its claim: a resend waits instead of producing.
	begin("slow", SendClaimed)
	if err := r.ExtendSend(ctx, "g", "u", "slow", attempts["slow"], time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, sendKey("g", "u", "slow")).Val(); ttl < 59*time.Minute {
		t.Fatalf("pending claim TTL after ExtendSend = %v, want about 1h", ttl)
	}
	begin("slow", SendPending)
	finish("slow", 7, 7)
	if err := r.ExtendSend(ctx, "g", "u", "slow", attempts["slow"], time.Hour); err != nil {
		t.Fatal(err)
	}
	if id := begin("slow", SendDone); id != 7 {
		t.Fatalf("resend after finish answered %d, want 7", id)
	}

	// The claim lapsed (the gateway died mid-produce): the resend produced
	// msgid 20 and finished before the first record, msgid 10, did.
	begin("twice", SendClaimed)
	if err := c.Del(ctx, sendKey("g", "u", "twice")).Err(); err != nil {
		t.Fatal(err)
	}
	begin("twice", SendClaimed)
	finish("twice", 20, 20)
	finish("twice", 10, 10)
	if id := begin("twice", SendDone); id != 10 {
		t.Fatalf("resend answered %d, want the first record 10", id)
	}

	// The claim lapsed, the resend produced msgid 12 and finished, and
	// then the first attempt failed: its abort leaves the answer alone, or
	// a third resend would produce again.
	begin("aborted", SendClaimed)
	lapsed := attempts["aborted"]
	if err := c.Del(ctx, sendKey("g", "u", "aborted")).Err(); err != nil {
		t.Fatal(err)
	}
	begin("aborted", SendClaimed)
	// While the second attempt is pending, the first's renewal and abort
	// leave its claim alone: a third resend waits for it.
	if err := r.ExtendSend(ctx, "g", "u", "aborted", lapsed, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, sendKey("g", "u", "aborted")).Val(); ttl > time.Second {
		t.Fatalf("a lapsed attempt's ExtendSend renewed another's claim: TTL %v", ttl)
	}
	if err := r.AbortSend(ctx, "g", "u", "aborted", lapsed); err != nil {
		t.Fatal(err)
	}
	begin("aborted", SendPending)
	finish("aborted", 12, 12)
	if err := r.AbortSend(ctx, "g", "u", "aborted", lapsed); err != nil {
		t.Fatal(err)
	}
	if id := begin("aborted", SendDone); id != 12 {
		t.Fatalf("resend after a lapsed attempt's abort answered %d, want 12", id)
	}
	// A pending claim is dropped by its abort: the retry produces at once.
	begin("failed", SendClaimed)
	if err := r.AbortSend(ctx, "g", "u", "failed", attempts["failed"]); err != nil {
		t.Fatal(err)
	}
	begin("failed", SendClaimed)

	// The same, with the first record finishing first.
	begin("twice-again", SendClaimed)
	if err := c.Del(ctx, sendKey("g", "u", "twice-again")).Err(); err != nil {
		t.Fatal(err)
	}
	begin("twice-again", SendClaimed)
	finish("twice-again", 11, 11)
	finish("twice-again", 21, 11)

	// The first record's sender never finished, but the persister has
	// claimed it: the second produce is answered with the first.
	now := time.Now().UnixMilli()
	claim(t, r, msg("g", "u", "lost", 30, now))
	begin("lost", SendClaimed)
	finish("lost", 40, 30)

	// A persister claim outside the dedup window is an earlier use of the
	// cmid, another message: it does not change the answer.
	claim(t, r, msg("g", "u", "reused", 5, t0))
	begin("reused", SendClaimed)
	finish("reused", 50, 50)
}

// testSendsOfAMemberBeingRemoved: a removal (MarkRemoving) refuses the
// member's new sends and counts those claimed before it until each is
// finished, aborted or lapses; resends of sends accepted before are still
// answered. The note is of one stretch: a member who joined again, or
// whose join was written after it (ClearLeaving), sends.
func testSendsOfAMemberBeingRemoved(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	applyMembers(t, r, join("g", "u", 3), join("g", "other", 3))
	claimed := func(cmid string) SendClaim {
		t.Helper()
		cl, err := r.BeginSend(ctx, "g", "u", cmid, time.Minute, nil)
		if err != nil || cl.State != SendClaimed || cl.Attempt == "" {
			t.Fatalf("BeginSend(%s) = %+v, %v; want claimed", cmid, cl, err)
		}
		return cl
	}
	inFlight := func(want int) {
		t.Helper()
		if n, err := r.SendsInFlight(ctx, "g", "u"); err != nil || n != want {
			t.Fatalf("SendsInFlight = %d, %v; want %d", n, err, want)
		}
	}
	done := claimed("done")
	if _, err := r.FinishSend(ctx, "g", "u", "done", done.Attempt, 5, time.Hour); err != nil {
		t.Fatal(err)
	}
	a, b, lapsing := claimed("a"), claimed("b"), claimed("lapsing")
	// The third lapses: its gateway died mid-produce.
	if err := c.ZAdd(ctx, sendingKey("g", "u"), redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: lapsing.Attempt}).Err(); err != nil {
		t.Fatal(err)
	}
	inFlight(2)

	if n, err := r.MarkRemoving(ctx, "g", "u", 4, "old", time.Minute); err != nil || n != 2 {
		t.Fatalf("MarkRemoving of another stretch = %d, %v; want 2 in flight", n, err)
	}
	claimed("not-this-stretch") // the note names another stretch
	n, err := r.MarkRemoving(ctx, "g", "u", 3, "r1", time.Minute)
	if err != nil || n != 3 {
		t.Fatalf("MarkRemoving = %d, %v; want 3 sends in flight", n, err)
	}
	// One removal of a stretch at a time: a second could end a stretch
	// joined again after the first. The first may note itself again.
	if _, err := r.MarkRemoving(ctx, "g", "u", 3, "r2", time.Minute); !errors.Is(err, ErrRemoving) {
		t.Fatalf("a second removal's MarkRemoving: %v; want ErrRemoving", err)
	}
	if err := r.EndRemoving(ctx, "g", "u", "r2"); err != nil {
		t.Fatal(err)
	}
	if n, err := r.MarkRemoving(ctx, "g", "u", 3, "r1", time.Minute); err != nil || n != 3 {
		t.Fatalf("MarkRemoving again by the same removal = %d, %v; want 3 (another's EndRemoving leaves the note)", n, err)
	}
	if cl, err := r.BeginSend(ctx, "g", "u", "new", time.Minute, nil); err != nil || cl.State != SendRemoving || cl.Attempt != "" {
		t.Fatalf("BeginSend during a removal = %+v, %v; want refused (removing), nothing claimed", cl, err)
	}
	if n := c.Exists(ctx, sendKey("g", "u", "new")).Val(); n != 0 {
		t.Fatal("a send refused during a removal left a claim")
	}
	if cl, err := r.BeginSend(ctx, "g", "u", "done", time.Minute, nil); err != nil || cl.State != SendDone || cl.MsgID != 5 {
		t.Fatalf("resend of a send accepted before the removal = %+v, %v; want done, msgid 5", cl, err)
	}
	if cl, err := r.BeginSend(ctx, "g", "other", "o1", time.Minute, nil); err != nil || cl.State != SendClaimed {
		t.Fatalf("another member's send during the removal = %+v, %v; want claimed", cl, err)
	}

	if _, err := r.FinishSend(ctx, "g", "u", "a", a.Attempt, 6, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := r.AbortSend(ctx, "g", "u", "b", b.Attempt); err != nil {
		t.Fatal(err)
	}
	inFlight(1)
	start := time.Now()
	if n, err := r.WaitSends(ctx, "g", "u", 200*time.Millisecond); err != nil || n != 1 {
		t.Fatalf("WaitSends with a send still in flight = %d, %v; want 1 left", n, err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("WaitSends gave up after %v, before its wait of 200ms", d)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		r.FinishSend(ctx, "g", "u", "not-this-stretch", lastAttempt(t, c, "not-this-stretch"), 7, time.Hour)
	}()
	if n, err := r.WaitSends(ctx, "g", "u", time.Minute); err != nil || n != 0 {
		t.Fatalf("WaitSends = %d, %v; want 0 once the last send finished", n, err)
	}

	// The removal failed: its end lets sends through.
	if err := r.EndRemoving(ctx, "g", "u", "r1"); err != nil {
		t.Fatal(err)
	}
	claimed("after-a-failed-removal")

	// Joined again (a join written, its notes cleared): sends go through.
	if _, err := r.MarkRemoving(ctx, "g", "u", 3, "r3", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.ClearLeaving(ctx, "g", "u"); err != nil {
		t.Fatal(err)
	}
	claimed("after-join")
}

// lastAttempt returns the attempt of the pending claim of (g, u, cmid).
func lastAttempt(t *testing.T, c redis.UniversalClient, cmid string) string {
	v, err := c.Get(context.Background(), sendKey("g", "u", cmid)).Result()
	if err != nil {
		t.Errorf("claim of %s: %v", cmid, err)
	}
	return strings.TrimPrefix(v, "pending:")
}

// testCursorState: the state an ack or read is decided on, in one call.
func testCursorState(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	st, err := r.CursorState(ctx, "g", "u", nil)
	if want := (CursorState{Member: Membership{State: MemberNone}, Head: -1, Ack: -1, Read: -1}); err != nil || st != want {
		t.Fatalf("before anything: %+v, %v; want %+v", st, err, want)
	}
	applyMembers(t, r, join("g", "u", 2))
	appendAll(t, r, msg("g", "s", "a", 5, t0), msg("g", "s", "b", 9, t0))
	advanceAcks(t, r, schema.Ack{Gid: "g", Uid: "u", Upto: 5})
	if err := r.AdvanceReads(ctx, []schema.Receipt{{Gid: "g", Uid: "u", Upto: 4}}); err != nil {
		t.Fatal(err)
	}
	st, err = r.CursorState(ctx, "g", "u", nil)
	want := CursorState{Member: Membership{State: MemberJoined, JoinedAt: 2}, Head: 9, Ack: 5, Read: 4}
	if err != nil || st != want {
		t.Fatalf("CursorState = %+v, %v; want %+v", st, err, want)
	}
}

// testCursorStatesShareRoundTrips: CursorState calls made while another's
// round trip is under way share the next one, each with its own answer,
// and one that gives up while queued leaves the others theirs.
func testCursorStatesShareRoundTrips(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	const n = 40
	appendAll(t, r, msg("g", "s", "a", 100, t0))
	for i := range n {
		uid := fmt.Sprintf("u%d", i)
		applyMembers(t, r, join("g", uid, int64(i)))
		advanceAcks(t, r, schema.Ack{Gid: "g", Uid: uid, Upto: int64(50 + i)})
	}
	gate := &pipelineGate{entered: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(gate)

	type answer struct {
		i   int
		st  CursorState
		err error
	}
	answers := make(chan answer, n+1)
	ask := func(ctx context.Context, i int) {
		st, err := r.CursorState(ctx, "g", fmt.Sprintf("u%d", i), nil)
		answers <- answer{i, st, err}
	}
	bounded, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go ask(bounded, 0) // its own round trip, held in the hook
	<-gate.entered
	for i := 1; i < n; i++ {
		go ask(bounded, i)
	}
	quitter, quit := context.WithCancel(context.Background())
	go ask(quitter, n) // not a member; gives up while queued
	for queued, deadline := 0, time.Now().Add(10*time.Second); queued < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued behind the first's round trip after 10 s; want %d", queued, n)
		}
		time.Sleep(time.Millisecond)
		queued = queuedIn(r, "g")
	}
	quit()
	if a := <-answers; a.i != n || !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the call that gave up while queued answered %+v; want it first, with context.Canceled", a)
	}
	close(gate.release)
	for range n {
		a := <-answers
		want := CursorState{Member: Membership{State: MemberJoined, JoinedAt: int64(a.i)}, Head: 100, Ack: int64(50 + a.i), Read: int64(a.i)} // a join reads up to where it joined
		if a.err != nil || a.st != want {
			t.Errorf("u%d: CursorState = %+v, %v; want %+v", a.i, a.st, a.err, want)
		}
	}
	if got := gate.pipelines.Load(); got != 2 {
		t.Errorf("%d calls made %d round trips; want 2 (the first alone, the %d that came during it together)", n+1, got, n)
	}
}

// testCursorStatesFailTogether: when a shared round trip fails before any
// command runs (a connection refused at its handshake), every call in it
// says why, and a group in another lane is not held up meanwhile.
func testCursorStatesFailTogether(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	other := ""
	for i := 0; i < 1000 && other == ""; i++ {
		if h := fmt.Sprintf("h%d", i); r.states.lane(h) != r.states.lane("g") {
			other = h
		}
	}
	if other == "" {
		t.Fatal("no group of 1000 in another lane than g's")
	}
	applyMembers(t, r, join(other, "u", 3))
	down := errors.New("refused at the handshake")
	gate := &pipelineGate{entered: make(chan struct{}), release: make(chan struct{}), fail: down}
	c.AddHook(gate)

	const n = 4
	errs := make(chan error, n)
	bounded, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ask := func() {
		_, err := r.CursorState(bounded, "g", "u", nil)
		errs <- err
	}
	go ask()
	<-gate.entered
	for range n - 1 {
		go ask()
	}
	for deadline := time.Now().Add(10 * time.Second); queuedIn(r, "g") < n-1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued after 10 s; want %d", queuedIn(r, "g"), n-1)
		}
	}
	gate.fail = nil // the other lane's round trip runs
	quick, cancelQuick := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelQuick()
	st, err := r.CursorState(quick, other, "u", nil)
	if err != nil || st.Member.State != MemberJoined {
		t.Fatalf("%s while g's round trip is held: %+v, %v; want joined, at once", other, st, err)
	}
	gate.fail = down
	close(gate.release)
	for range n {
		if err := <-errs; !errors.Is(err, down) {
			t.Errorf("a call in the failed round trip answered %v; want %v", err, down)
		}
	}
}

func queuedIn(r *Redis, gid string) int {
	l := r.states.lane(gid)
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queued)
}

// pipelineGate counts pipelines and holds the first until released; with
// fail set, pipelines fail with it before any command runs.
type pipelineGate struct {
	pipelines atomic.Int64
	entered   chan struct{}
	release   chan struct{}
	fail      error
}

func (g *pipelineGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *pipelineGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *pipelineGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if g.pipelines.Add(1) == 1 {
			close(g.entered)
			<-g.release
		}
		if g.fail != nil {
			return g.fail
		}
		return next(ctx, cmds)
	}
}

// testMembershipBuilt: the reads a gateway answers a member with (the
// membership, the cursor state, the send claim) are checked against the
// member projector's replay mark in their own round trip. While Redis is
// rebuilt, a member who left reads as joined between their join and their
// leave in the replay; the reads say ErrReplaying then, and a send claims
// nothing that would hold up its resend.
func testMembershipBuilt(t *testing.T, c redis.UniversalClient) {
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	built := &Fence{Consumer: "chat.member-projector", Topic: "chat.members", Partition: 2}
	applyMembers(t, r, join("g", "u", -1))

	check := func(when string, want error) {
		t.Helper()
		if m, err := r.Membership(ctx, "g", "u", built); !errors.Is(err, want) || (want == nil && m.State != MemberJoined) {
			t.Errorf("%s: Membership = %+v, %v; want joined, %v", when, m, err, want)
		}
		if st, err := r.CursorState(ctx, "g", "u", built); !errors.Is(err, want) || (want == nil && st.Member.State != MemberJoined) {
			t.Errorf("%s: CursorState = %+v, %v; want joined, %v", when, st, err, want)
		}
		if err := c.ScriptFlush(ctx).Err(); err != nil { // BeginSend's script reloads beside the check
			t.Fatal(err)
		}
		if cl, err := r.BeginSend(ctx, "g", "u", "c1", time.Minute, built); !errors.Is(err, want) || (want == nil && cl.State != SendClaimed) {
			t.Errorf("%s: BeginSend = %+v, %v; want claimed, %v", when, cl, err, want)
		}
	}
	check("before the projector replayed", ErrReplaying)
	// Nothing claimed: the same cmid, unchecked, is new.
	cl, err := r.BeginSend(ctx, "g", "u", "c1", time.Minute, nil)
	if err != nil || cl.State != SendClaimed {
		t.Fatalf("BeginSend after a refused one = %+v, %v; want claimed (nothing held)", cl, err)
	}
	if err := r.AbortSend(ctx, "g", "u", "c1", cl.Attempt); err != nil {
		t.Fatal(err)
	}

	if ok, err := r.AdvanceOffset(ctx, built.Consumer, built.Topic, built.Partition, -1, 1); !ok || err != nil {
		t.Fatalf("AdvanceOffset = %v, %v", ok, err)
	}
	check("claimed, not replayed", ErrReplaying)
	if ok, err := r.MarkReplayed(ctx, built.Consumer, built.Topic, built.Partition); !ok || err != nil {
		t.Fatalf("MarkReplayed = %v, %v", ok, err)
	}
	check("replayed", nil)
}
