package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
)

func TestRedisMiniredis(t *testing.T) {
	runRedisSuite(t, func(t *testing.T) redis.UniversalClient {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { c.Close() })
		return c
	})
}

func TestRedisServer(t *testing.T) {
	srv := testserver.NewRedis(t)
	runRedisSuite(t, func(t *testing.T) redis.UniversalClient {
		return newServerClient(t, srv)
	})
}

// newServerClient returns a client on srv after FLUSHALL.
func newServerClient(t testing.TB, srv *testserver.Redis) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	return c
}

// TestRedisServerRestart restarts redis-server under a live store: the
// data is gone (the projections replay), the scripts are gone from the
// cache, and the store works on without being recreated.
func TestRedisServerRestart(t *testing.T) {
	srv := testserver.NewRedis(t)
	r := newTestRedis(t, newServerClient(t, srv), RedisConfig{})
	ctx := context.Background()
	msgs := batchOf("g1", 0, 1, 2)
	if _, err := r.ClaimSends(ctx, nil, msgs); err != nil {
		t.Fatal(err)
	}
	appendAll(t, r, msgs...)

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	down, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := r.Ping(down); err == nil {
		t.Fatal("Ping succeeded with redis-server killed")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if h, err := r.Head(ctx, "g1"); err != nil || h != -1 {
		t.Fatalf("Head after restart = %d, %v; want -1 (data lost)", h, err)
	}
	dup, err := r.ClaimSends(ctx, nil, msgs)
	if err != nil || !slicesEqual(dup, []bool{false, false, false}) {
		t.Fatalf("ClaimSends after restart = %v, %v", dup, err)
	}
	appendAll(t, r, msgs...)
	if ids, complete := window(t, r, "g1", -1, 10); !slicesEqual(ids, []int64{0, 1, 2}) || !complete {
		t.Errorf("window rebuilt = %v complete=%v", ids, complete)
	}
}

func TestRedisConfig(t *testing.T) {
	for _, cfg := range []RedisConfig{
		{WindowSize: -2},
		{DedupWindow: -time.Second},
		{DedupWindow: time.Microsecond},
	} {
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: Validate() = %v, want ErrInvalidConfig", cfg, err)
		}
		if _, err := NewRedis(redis.NewClient(&redis.Options{}), cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: NewRedis: %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := NewRedis(nil, RedisConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewRedis(nil): %v, want ErrInvalidConfig", err)
	}
	r, err := NewRedis(redis.NewClient(&redis.Options{}), RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (RedisConfig{WindowSize: 1000, DedupWindow: 24 * time.Hour}); r.cfg != want {
		t.Errorf("defaults = %+v, want %+v", r.cfg, want)
	}
}

// benchGroups and benchBatch shape the benchmarks: a consumer's batch of
// 10,000 records over 1,000 groups.
const (
	benchGroups = 1000
	benchBatch  = 10000
)

func benchGids() []string {
	gids := make([]string, benchGroups)
	for i := range gids {
		gids[i] = fmt.Sprint("group-", i)
	}
	return gids
}

func benchStore(b *testing.B) *Redis {
	srv := testserver.NewRedis(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { c.Close() })
	return newTestRedis(b, c, RedisConfig{})
}

func BenchmarkRedisAppendWindow(b *testing.B) {
	r := benchStore(b)
	ctx := context.Background()
	body := make([]byte, 200)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	gids := benchGids()
	batch := make([]schema.Message, benchBatch)
	next := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			batch[i] = schema.Message{
				Gid: gids[next%benchGroups], Sender: "user-1",
				ClientMsgID: "c" + strconv.FormatInt(next, 10), SentAt: t0 + next, Body: body, MsgID: next,
			}
			next++
		}
		if err := r.AppendWindow(ctx, nil, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkRedisClaimSends(b *testing.B) {
	r := benchStore(b)
	ctx := context.Background()
	gids := benchGids()
	batch := make([]schema.Message, benchBatch)
	next := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			batch[i] = schema.Message{
				Gid: gids[next%benchGroups], Sender: "user-1",
				ClientMsgID: "c" + strconv.FormatInt(next, 10), SentAt: time.Now().UnixMilli(), MsgID: next,
			}
			next++
		}
		if _, err := r.ClaimSends(ctx, nil, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkRedisAdvanceAcks(b *testing.B) {
	r := benchStore(b)
	ctx := context.Background()
	const members = 500
	batch := make([]schema.Ack, benchBatch)
	uids := make([]string, members)
	for i := range uids {
		uids[i] = fmt.Sprint("user-", i)
	}
	gids := benchGids()
	next := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			batch[i] = schema.Ack{Gid: gids[next%benchGroups], Uid: uids[(next/benchGroups)%members], Upto: next}
			next++
		}
		if err := r.AdvanceAcks(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "acks/s")
}
