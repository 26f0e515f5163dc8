package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

// wipeBefore is a go-redis hook that flushes Redis (through another
// client) just before the next pipeline holding a command named cmd runs:
// Redis losing its data between a fenced call's check and its writes.
type wipeBefore struct {
	cmd   string
	other redis.UniversalClient
	armed atomic.Bool
}

func (h *wipeBefore) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *wipeBefore) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *wipeBefore) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == h.cmd && h.armed.CompareAndSwap(true, false) {
				if err := h.other.FlushAll(ctx).Err(); err != nil {
					return err
				}
				break
			}
		}
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*wipeBefore)(nil)

// fencedStore returns a store on a fresh redis-server whose client runs
// hook, another client on the same server, and a fence whose position is
// saved.
func fencedStore(t *testing.T, hook redis.Hook) (*Redis, redis.UniversalClient, *Fence) {
	t.Helper()
	srv := testserver.NewRedis(t)
	c := newServerClient(t, srv)
	if hook != nil {
		c.AddHook(hook)
	}
	r := newTestRedis(t, c, RedisConfig{})
	f := &Fence{Consumer: "chat.persister", Topic: "chat.messages", Partition: 3}
	ctx := context.Background()
	if ok, err := r.AdvanceOffset(ctx, f.Consumer, f.Topic, f.Partition, -1, -2); !ok || err != nil {
		t.Fatalf("claiming the position: %v, %v", ok, err)
	}
	other := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { other.Close() })
	return r, other, f
}

func keyCount(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	n, err := c.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFencedWritesGoOnlyWhileTheSavedPositionIsThere(t *testing.T) {
	r, other, f := fencedStore(t, nil)
	ctx := context.Background()
	msgs := []schema.Message{msg("g1", "u1", "c1", 0, 1000), msg("g1", "u1", "c2", 1, 1000)}
	if dup, err := r.ClaimSends(ctx, f, msgs); err != nil || !slicesEqual(dup, []bool{false, false}) {
		t.Fatalf("ClaimSends with the position saved = %v, %v", dup, err)
	}
	if err := r.AppendWindow(ctx, f, msgs); err != nil {
		t.Fatalf("AppendWindow with the position saved: %v", err)
	}
	if ids, complete := window(t, r, "g1", -1, 10); !slicesEqual(ids, []int64{0, 1}) || !complete {
		t.Fatalf("window = %v complete=%v, want [0 1] complete", ids, complete)
	}

	if err := other.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	more := []schema.Message{msg("g1", "u1", "c3", 2, 1000)}
	if _, err := r.ClaimSends(ctx, f, more); !errors.Is(err, ErrStateLost) {
		t.Fatalf("ClaimSends after the wipe: %v, want ErrStateLost", err)
	}
	if err := r.AppendWindow(ctx, f, more); !errors.Is(err, ErrStateLost) {
		t.Fatalf("AppendWindow after the wipe: %v, want ErrStateLost", err)
	}
	if n := keyCount(t, other); n != 0 {
		t.Fatalf("%d keys written into the wiped Redis, want none", n)
	}
	// Unfenced writes (tools, tests) are not affected.
	if err := r.AppendWindow(ctx, nil, more); err != nil {
		t.Fatalf("AppendWindow without a fence: %v", err)
	}
}

func TestFencedWritesUndoWhatWentIntoARedisWipedUnderThem(t *testing.T) {
	ctx := context.Background()
	for _, cmd := range []string{"zadd", "set"} {
		t.Run(cmd, func(t *testing.T) {
			h := &wipeBefore{cmd: cmd}
			r, other, f := fencedStore(t, h)
			h.other = other
			msgs := []schema.Message{msg("g1", "u1", "c1", 0, 1000), msg("g2", "u1", "c1", 1, 1000)}
			h.armed.Store(true)
			var err error
			if cmd == "set" {
				_, err = r.ClaimSends(ctx, f, msgs)
			} else {
				err = r.AppendWindow(ctx, f, msgs)
			}
			if !errors.Is(err, ErrStateLost) {
				t.Fatalf("with Redis wiped before the %s pipeline: %v, want ErrStateLost", cmd, err)
			}
			if h.armed.Load() {
				t.Fatal("the wipe never happened; the test proves nothing")
			}
			if n := keyCount(t, other); n != 0 {
				keys, _ := other.Keys(ctx, "*").Result()
				t.Fatalf("%d keys left in the wiped Redis (%v), want none", n, keys)
			}
		})
	}
}

// A batch whose resend goes to the claim script (its original claimed the
// key in the first round trip) does not leave the resend's claim in a Redis
// wiped between the two: on the replay, that claim would let both the
// original and the resend through.
func TestAResendsClaimDoesNotOutliveAWipeBetweenTheRoundTrips(t *testing.T) {
	ctx := context.Background()
	h := &wipeBefore{cmd: "evalsha"}
	r, other, f := fencedStore(t, h)
	h.other = other
	original, resend := msg("g1", "u1", "c1", 0, 1000), msg("g1", "u1", "c1", 1, 1000)
	h.armed.Store(true)
	if _, err := r.ClaimSends(ctx, f, []schema.Message{original, resend}); !errors.Is(err, ErrStateLost) {
		t.Fatalf("with Redis wiped before the claim script: %v, want ErrStateLost", err)
	}
	if h.armed.Load() {
		t.Fatal("the wipe never happened; the test proves nothing")
	}
	if n := keyCount(t, other); n != 0 {
		keys, _ := other.Keys(ctx, "*").Result()
		t.Fatalf("%d keys left in the wiped Redis (%v), want none", n, keys)
	}
	// The replay after the wipe (the position claimed again): the resend
	// is a duplicate of its original, as on the first pass.
	if ok, err := r.AdvanceOffset(ctx, f.Consumer, f.Topic, f.Partition, -1, -2); !ok || err != nil {
		t.Fatalf("claiming the position again: %v, %v", ok, err)
	}
	dup, err := r.ClaimSends(ctx, f, []schema.Message{original, resend})
	if err != nil || !slicesEqual(dup, []bool{false, true}) {
		t.Fatalf("the replay's claims = %v, %v; want the resend a duplicate", dup, err)
	}
}

// The fence's check must not hide a Redis that is down behind ErrStateLost.
func TestFenceReportsAnUnreachableRedisAsSuch(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	r := newTestRedis(t, c, RedisConfig{})
	f := &Fence{Consumer: "chat.persister", Topic: "chat.messages", Partition: 0}
	err = r.AppendWindow(context.Background(), f, []schema.Message{msg("g1", "u1", "c1", 0, 1000)})
	if err == nil || errors.Is(err, ErrStateLost) {
		t.Fatalf("AppendWindow with Redis down: %v, want a connection error", err)
	}
}

// A replay mark lives and dies with its position: it is written only while
// the position is saved, a wipe takes it, and Offsets does not mistake it
// for a partition.
func TestReplayMarkGoesWithThePosition(t *testing.T) {
	r, other, f := fencedStore(t, nil)
	ctx := context.Background()
	if err := r.CheckReplayed(ctx, f.Consumer, f.Topic, f.Partition); !errors.Is(err, ErrReplaying) {
		t.Fatalf("CheckReplayed before any mark = %v, want ErrReplaying", err)
	}
	if ok, err := r.MarkReplayed(ctx, f.Consumer, f.Topic, f.Partition); !ok || err != nil {
		t.Fatalf("MarkReplayed with the position saved = %v, %v", ok, err)
	}
	if err := r.CheckReplayed(ctx, f.Consumer, f.Topic, f.Partition); err != nil {
		t.Fatalf("CheckReplayed after the mark = %v", err)
	}
	if err := r.CheckReplayed(ctx, f.Consumer, f.Topic, f.Partition+1); !errors.Is(err, ErrReplaying) {
		t.Fatalf("CheckReplayed of another partition = %v, want ErrReplaying", err)
	}
	if got, err := r.Offsets(ctx, f.Consumer, f.Topic); err != nil || fmt.Sprint(got) != "map[3:-2]" {
		t.Fatalf("Offsets beside a mark = %v, %v; want map[3:-2]", got, err)
	}

	if err := other.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckReplayed(ctx, f.Consumer, f.Topic, f.Partition); !errors.Is(err, ErrReplaying) {
		t.Fatalf("CheckReplayed after a wipe = %v, want ErrReplaying", err)
	}
	if ok, err := r.MarkReplayed(ctx, f.Consumer, f.Topic, f.Partition); ok || err != nil {
		t.Fatalf("MarkReplayed with the position gone = %v, %v; want false", ok, err)
	}
	if n := keyCount(t, other); n != 0 {
		t.Fatalf("a mark without its position wrote %d keys", n)
	}
}

// An origin lives and dies with its position like the replay mark, and a
// position set by hand (SaveOffsets) makes the next record the origin.
func TestOriginGoesWithThePosition(t *testing.T) {
	r, other, f := fencedStore(t, nil)
	ctx := context.Background()
	if o, next, err := r.Origin(ctx, *f); o != nil || next || err != nil {
		t.Fatalf("Origin before any = %v, %v, %v; want none", o, next, err)
	}
	want := Origin{Offset: 17, SentAt: 1_700_000_000_123}
	if err := r.SaveOrigin(ctx, *f, -2, want); err != nil {
		t.Fatal(err)
	}
	if o, next, err := r.Origin(ctx, *f); o == nil || *o != want || next || err != nil {
		t.Fatalf("Origin = %v, %v, %v; want %+v", o, next, err, want)
	}
	if got, err := r.Offsets(ctx, f.Consumer, f.Topic); err != nil || fmt.Sprint(got) != "map[3:-2]" {
		t.Fatalf("Offsets beside an origin = %v, %v; want map[3:-2]", got, err)
	}

	if err := r.SaveOffsets(ctx, f.Consumer, f.Topic, map[int]int64{f.Partition: 40}); err != nil {
		t.Fatal(err)
	}
	if o, next, err := r.Origin(ctx, *f); o != nil || !next || err != nil {
		t.Fatalf("Origin after a position set by hand = %v, %v, %v; want the next record", o, next, err)
	}
	if got, err := r.Offsets(ctx, f.Consumer, f.Topic); err != nil || fmt.Sprint(got) != "map[3:40]" {
		t.Fatalf("Offsets beside an origin to come = %v, %v; want map[3:40]", got, err)
	}

	if err := other.HSet(ctx, offsetsKey(f.Consumer), originField(f.Topic, f.Partition), "17").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Origin(ctx, *f); !errors.Is(err, ErrCorruptValue) {
		t.Fatalf("Origin of %q = %v, want ErrCorruptValue", "17", err)
	}

	if err := r.SaveOrigin(ctx, *f, -2, want); !errors.Is(err, ErrStateLost) {
		t.Fatalf("SaveOrigin from -2 with the position set by hand to 40 = %v, want ErrStateLost", err)
	}
	if err := other.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.SaveOrigin(ctx, *f, -2, want); !errors.Is(err, ErrStateLost) {
		t.Fatalf("SaveOrigin with the position gone = %v, want ErrStateLost", err)
	}
	if n := keyCount(t, other); n != 0 {
		t.Fatalf("an origin without its position wrote %d keys", n)
	}
}
