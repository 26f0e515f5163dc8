package consumers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// BenchmarkFanoutLargeGroupFewOnline routes one message at a time to a
// group of 1,000 and of 10,000 members of whom 5 are online (on one node):
// the cost of the members offline, per message, in the fan-out's CPU and
// in the presence look-ups it makes in Redis.
func BenchmarkFanoutLargeGroupFewOnline(b *testing.B) {
	for _, members := range []int{1000, 10000} {
		b.Run(fmt.Sprint("members=", members), func(b *testing.B) { benchFanoutFewOnline(b, members, 5) })
	}
}

func benchFanoutFewOnline(b *testing.B, members, online int) {
	k := newKafka(b, 1)
	srv := testserver.NewRedis(b)
	rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	b.Cleanup(func() { rc.Close() })
	rs, err := store.NewRedis(rc, store.RedisConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	joins := make([]schema.Member, members)
	var on []string
	for i := range joins {
		uid := fmt.Sprint("user-", i)
		joins[i] = schema.Member{Gid: "big", Uid: uid, Op: schema.OpJoin, Pos: -1}
		if i < online {
			on = append(on, uid)
		}
	}
	if err := k.prod.SendMembers(ctx, joins...); err != nil {
		b.Fatal(err)
	}
	if err := rs.SetOnline(ctx, "node-0", on, time.Hour, false); err != nil {
		b.Fatal(err)
	}
	ch, err := rs.SubscribePushes(ctx, "node-0")
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range ch {
		}
	}()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &Fanout{Redis: rs, Logger: quiet}
	r, err := f.Runner(Base{Brokers: k.brokers(), DeadLetter: k.prod})
	if err != nil {
		b.Fatal(err)
	}
	r.partitions = 1 // as Run reads it, before the partitions it hands the fan-out
	rec := []Record[schema.Message]{{Event: schema.Message{Gid: "big", Sender: "user-0", Body: []byte("hello, everyone")}}}
	handle := func(i int64) {
		rec[0].Offset = i
		rec[0].Event.ClientMsgID = fmt.Sprint("c", i)
		rec[0].Event.SentAt = time.Now().UnixMilli()
		if err := f.Handle(ctx, 0, rec); err != nil {
			b.Fatal(err)
		}
	}
	handle(0)
	cpu0, err := testserver.RedisCPU(ctx, rc)
	if err != nil {
		b.Fatal(err)
	}
	s0 := f.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	var i int64 = 1
	for b.Loop() {
		handle(i)
		i++
		time.Sleep(time.Millisecond) // 1,000 msg/s at most: the presence cache expires as in life
	}
	b.StopTimer()
	cpu1, _ := testserver.RedisCPU(ctx, rc)
	s := f.Stats()
	n := float64(i - 1)
	if got := s.Pushes - s0.Pushes; got != int64(online)*(i-1) {
		b.Fatalf("%d pushes for %d messages", got, i-1)
	}
	b.ReportMetric(float64(s.Lookups-s0.Lookups)/n, "lookups/msg")
	b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/n, "redis-ns/msg")
}
