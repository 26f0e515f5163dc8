package consumers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// BenchmarkFanoutRoute500 routes one message at a time to a 500-member
// group, all online on 4 nodes, through Handle: membership sync with the
// broker (kfake), presence (cached, and not), rendering, publishing to
// real redis-server, 4 subscribers decoding.
func BenchmarkFanoutRoute500(b *testing.B) {
	for _, bc := range []struct {
		name string
		ttl  time.Duration
	}{{"cached", 0}, {"uncached", -1}} {
		b.Run(bc.name, func(b *testing.B) {
			const members, nodes = 500, 4
			g := newBigGroup(b, members, bc.ttl, func(i int) string { return fmt.Sprint("node-", i%nodes) })
			b.ReportAllocs()
			b.ResetTimer()
			var i int64 = 1
			for b.Loop() {
				g.handle(i)
				i++
			}
			b.StopTimer()
			if s := g.f.Stats(); s.Pushes != members*i {
				b.Fatalf("%d pushes for %d messages", s.Pushes, i)
			}
			b.ReportMetric(float64(members*(i-1))/b.Elapsed().Seconds(), "pushes/s")
		})
	}
}

// BenchmarkFanoutLargeGroupFewOnline routes one message at a time to a
// group of 1,000 and of 10,000 members of whom 5 are online (on one node):
// the cost of the members offline, per message, in the fan-out's CPU and
// in the presence look-ups it makes in Redis.
func BenchmarkFanoutLargeGroupFewOnline(b *testing.B) {
	for _, members := range []int{1000, 10000} {
		b.Run(fmt.Sprint("members=", members), func(b *testing.B) {
			const online = 5
			g := newBigGroup(b, members, 0, func(i int) string {
				if i < online {
					return "node-0"
				}
				return ""
			})
			cpu0, err := testserver.RedisCPU(g.ctx, g.rc)
			if err != nil {
				b.Fatal(err)
			}
			s0 := g.f.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			var i int64 = 1
			for b.Loop() {
				g.handle(i)
				i++
				time.Sleep(time.Millisecond) // 1,000 msg/s at most: the presence cache expires as in life
			}
			b.StopTimer()
			cpu1, _ := testserver.RedisCPU(g.ctx, g.rc)
			s := g.f.Stats()
			n := float64(i - 1)
			if got := s.Pushes - s0.Pushes; got != online*(i-1) {
				b.Fatalf("%d pushes for %d messages", got, i-1)
			}
			b.ReportMetric(float64(s.Lookups-s0.Lookups)/n, "lookups/msg")
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/n, "redis-ns/msg")
		})
	}
}

// bigGroup is a fan-out of one partition (on kfake and a real
// redis-server) before group "big", whose message 0 it has routed, so its
// member follower holds the joins.
type bigGroup struct {
	ctx    context.Context
	rc     redis.UniversalClient
	f      *Fanout
	handle func(i int64) // routes message i of big through Handle
}

// newBigGroup joins members users to big, user i online on node nodeOf(i)
// ("" offline), each node's pushes read and dropped by a subscriber, and
// starts a fan-out of presence cache presenceTTL (0: the default; -1:
// none).
func newBigGroup(b *testing.B, members int, presenceTTL time.Duration, nodeOf func(i int) string) *bigGroup {
	k := newKafka(b, 1)
	srv := testserver.NewRedis(b)
	rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	b.Cleanup(func() { rc.Close() })
	rs, err := store.NewRedis(rc, store.RedisConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var subscribers sync.WaitGroup
	b.Cleanup(func() { cancel(); subscribers.Wait() })
	joins := make([]schema.Member, members)
	online := map[string][]string{}
	for i := range joins {
		uid := fmt.Sprint("user-", i)
		joins[i] = schema.Member{Gid: "big", Uid: uid, Op: schema.OpJoin, Pos: -1}
		if node := nodeOf(i); node != "" {
			online[node] = append(online[node], uid)
		}
	}
	if err := k.prod.SendMembers(ctx, joins...); err != nil {
		b.Fatal(err)
	}
	for node, uids := range online {
		if err := rs.SetOnline(ctx, node, uids, time.Hour, false); err != nil {
			b.Fatal(err)
		}
		ch, err := rs.SubscribePushes(ctx, node)
		if err != nil {
			b.Fatal(err)
		}
		subscribers.Go(func() {
			for range ch {
			}
		})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &Fanout{Redis: rs, PresenceTTL: presenceTTL, Logger: quiet}
	r, err := f.Runner(Base{Brokers: k.brokers(), DeadLetter: k.prod})
	if err != nil {
		b.Fatal(err)
	}
	r.partitions = 1 // as Run reads it, before the partitions it hands the fan-out
	rec := []Record[schema.Message]{{Event: schema.Message{Gid: "big", Sender: "user-0", Body: []byte("hello, everyone")}}}
	g := &bigGroup{ctx: ctx, rc: rc, f: f, handle: func(i int64) {
		rec[0].Offset = i
		rec[0].Event.ClientMsgID = fmt.Sprint("c", i)
		rec[0].Event.SentAt = time.Now().UnixMilli()
		if err := f.Handle(ctx, 0, rec); err != nil {
			b.Fatal(err)
		}
	}}
	g.handle(0) // the follower reads the joins
	return g
}
