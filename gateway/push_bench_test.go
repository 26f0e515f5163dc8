package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// BenchmarkPushes measures pushes per second through one gateway: batches
// as the fan-out publishes them (one message to a group of 50, ten groups a
// batch) arrive on the node's Redis channel, the gateway hands them to
// 1,000 connections, and 1,000 WebSocket clients in this process read them
// (counting messages, not decoding them). Clients, gateway, redis-server and
// publisher share the machine's cores.
//
// The publisher keeps at most a window of pushes unread: a large window lets
// pushes queue and share frames, as under a burst; a small one sends nearly
// every push in a frame of its own.
func BenchmarkPushes(b *testing.B) {
	for _, window := range []int64{10_000, 50_000} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) { benchPushes(b, window) })
	}
}

func benchPushes(b *testing.B, inflight int64) {
	const (
		clients   = 1000
		groupSize = 50
		perBatch  = 10 // messages (groups) per published batch
	)
	g, url, rs := benchGateway(b)
	ctx := context.Background()
	var got, frames atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		tok, err := IssueToken([]byte(testSecret), fmt.Sprintf("u%d", i), time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		ws, _, err := websocket.Dial(ctx, url+"?token="+tok, nil)
		if err != nil {
			b.Fatal(err)
		}
		ws.SetReadLimit(1 << 20)
		if _, _, err := ws.Read(ctx); err != nil { // authed
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ws.CloseNow()
			for {
				_, p, err := ws.Read(ctx)
				if err != nil {
					return
				}
				got.Add(int64(bytes.Count(p, []byte(`"msgid":`))))
				frames.Add(1)
			}
		}()
	}
	waitConns(b, g, clients)

	body := strings.Repeat("x", 100)
	batch := func(seq int64) store.PushBatch {
		var pb store.PushBatch
		for k := 0; k < perBatch; k++ {
			grp := int(seq*perBatch+int64(k)) % (clients / groupSize)
			msg, _ := json.Marshal(protocol.Message{Gid: fmt.Sprintf("g%d", grp), MsgID: seq, Sender: "s", SentAt: time.Now().UnixMilli(), Cmid: "c", Body: body})
			uids := make([]string, groupSize)
			for j := range uids {
				uids[j] = fmt.Sprintf("u%d", grp*groupSize+j)
			}
			pb.Items = append(pb.Items, store.PushItem{Msg: msg, Uids: uids})
		}
		return pb
	}
	b.ResetTimer()
	start := time.Now()
	var sent int64
	for seq := int64(0); sent < int64(b.N); seq++ {
		for sent-got.Load() > inflight {
			time.Sleep(100 * time.Microsecond)
		}
		if err := rs.PublishPushes(ctx, "bench", batch(seq)); err != nil {
			b.Fatal(err)
		}
		sent += perBatch * groupSize
	}
	deadline := time.Now().Add(time.Minute)
	for got.Load() < sent {
		if time.Now().After(deadline) {
			b.Fatalf("delivered %d of %d pushes; %d clients cut as slow", got.Load(), sent, g.Stats().SlowCut)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(sent)/time.Since(start).Seconds(), "pushes/s")
	b.ReportMetric(float64(sent)/float64(frames.Load()), "pushes/frame")
	if cut := g.Stats().SlowCut; cut > 0 {
		b.Fatalf("%d clients cut as slow", cut)
	}
}

// benchGateway starts one gateway (node "bench") on kfake and a real
// redis-server, and returns its WebSocket URL.
func benchGateway(b *testing.B) (*Gateway, string, *store.Redis) {
	br := testserver.NewBroker(b)
	// A sync reads memberships fenced by the member projector's partition.
	if err := topics.Ensure(context.Background(), topics.Config{Brokers: []string{br.Addr()}, Partitions: 4}, nil); err != nil {
		b.Fatal(err)
	}
	prod, err := producers.New(producers.Config{Brokers: []string{br.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { prod.Close() })
	srv := testserver.NewRedis(b)
	rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	b.Cleanup(func() { rc.Close() })
	rs, err := store.NewRedis(rc, store.RedisConfig{})
	if err != nil {
		b.Fatal(err)
	}
	// As a member projector caught up with an empty chat.members does.
	for part := range 4 {
		ctx := context.Background()
		if _, err := rs.AdvanceOffset(ctx, consumers.GroupMemberProjector, topics.Members, part, -1, kafka.FirstOffset); err != nil {
			b.Fatal(err)
		}
		if ok, err := rs.MarkReplayed(ctx, consumers.GroupMemberProjector, topics.Members, part); !ok || err != nil {
			b.Fatalf("marking chat.members/%d replayed: %v, %v", part, ok, err)
		}
	}
	hist, err := history.New(history.Config{Redis: rs})
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(Config{Redis: rs, Producer: prod, History: hist, Secret: []byte(testSecret), Node: "bench",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(g.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }()
	b.Cleanup(func() {
		sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
		defer c()
		g.Shutdown(sctx)
		hs.Close()
		cancel()
		<-done
	})
	for deadline := time.Now().Add(10 * time.Second); !g.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the gateway did not get its pushes within 10s")
		}
	}
	return g, "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws", rs
}

func waitConns(b *testing.B, g *Gateway, n int) {
	deadline := time.Now().Add(30 * time.Second)
	for g.Stats().Conns < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d connections registered", g.Stats().Conns, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
