package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// A role started while ClickHouse is down waits for it instead of exiting,
// and the fan-out, which never uses ClickHouse, starts without it.
func TestRolesStartWhileClickHouseIsDown(t *testing.T) {
	b := testserver.NewBroker(t)
	redis := testserver.NewRedis(t)
	ch := testserver.NewClickHouse(t)
	if err := ch.Stop(); err != nil {
		t.Fatal(err)
	}
	env := func(addr string) map[string]string {
		return map[string]string{
			"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": redis.Addr,
			"CHAT_CLICKHOUSE_ADDRS": ch.Addr, "CHAT_PARTITIONS": "2",
			"CHAT_JWT_SECRET": strings.Repeat("s", 32), "CHAT_ADMIN_TOKEN": "admin",
		}
	}
	start := func(role string) (addr string, logs *testserver.Output, stop func()) {
		addr, logs = freeAddr(t), &testserver.Output{}
		return addr, logs, runRole(t, role, env(addr), logs)
	}

	fanAddr, _, stopFanout := start("fanout")
	defer stopFanout()
	waitHealthy(t, "http://"+fanAddr+"/healthz")

	gwAddr, gwLog, stopGateway := start("gateway")
	defer stopGateway()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(gwLog.String(), "ClickHouse at "+ch.Addr+" is not ready; waiting for it") {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not say it waits for ClickHouse:\n%s", gwLog)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := ch.Start(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, "http://"+gwAddr+"/healthz")
}

// A role started before its broker (a deployment that starts everything at
// once) waits for it instead of exiting; a topic that differs from its
// spec still ends the start at once, with what to do.
func TestRolesStartWhileKafkaIsDown(t *testing.T) {
	redis := testserver.NewRedis(t)
	kafkaAddr := freeAddr(t)
	env := func(addr, partitions string) map[string]string {
		return map[string]string{
			"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": kafkaAddr, "CHAT_REDIS_ADDRS": redis.Addr, "CHAT_PARTITIONS": partitions,
			"CHAT_JWT_SECRET": strings.Repeat("s", 32), "CHAT_ADMIN_TOKEN": "admin",
		}
	}
	gwAddr, gwLog := freeAddr(t), &testserver.Output{}
	defer runRole(t, "gateway", env(gwAddr, "2"), gwLog)()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(gwLog.String(), "Kafka at "+kafkaAddr+" is not ready; waiting for it") {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not say it waits for Kafka:\n%s", gwLog)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, err := broker.Start(broker.Config{Listen: kafkaAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitHealthy(t, "http://"+gwAddr+"/readyz")

	// The topics now have 2 partitions: a role that asks for 3 is told so.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	settings := env(freeAddr(t), "3")
	start := time.Now()
	err = runTo(ctx, []string{"projector"}, func(k string) string { return settings[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "partitions") {
		t.Fatalf("a projector asking for 3 partitions of 2-partition topics: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the mismatch was waited on for %v instead of refused at once", took.Round(time.Second))
	}
}

// The fan-out is ready once it holds its partitions, not before: a rolling
// update that moves on while no fan-out reads chat.messages leaves online
// members without pushes.
func TestTheFanoutIsReadyOnceItHoldsItsPartitions(t *testing.T) {
	b := testserver.NewBroker(t)
	redis := testserver.NewRedis(t)
	var refuse atomic.Bool
	var refused atomic.Int32
	refuse.Store(true)
	b.Cluster().ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.(*kmsg.JoinGroupRequest).ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil, true
	})
	addr := freeAddr(t)
	defer runRole(t, "fanout", map[string]string{
		"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": redis.Addr, "CHAT_PARTITIONS": "2",
	}, io.Discard)()
	ready := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitFor(t, "the fan-out's HTTP", func() bool { code, _ := ready(); return code != 0 })
	// A join is made again only once the one before it was refused: after
	// two, the fan-out has taken a refusal and holds no partition.
	waitFor(t, "two joins refused", func() bool { return refused.Load() >= 2 })
	if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, `"role":"fanout"`) || !strings.Contains(body, `"waiting_for":["fanout"]`) {
		t.Fatalf("/readyz of a fan-out that holds no partition: %d %s; want 503 naming the role and the part not ready", code, body)
	}
	refuse.Store(false)
	waitHealthy(t, "http://"+addr+"/readyz")
}

// CHAT_CLICKHOUSE_ADDRS naming ClickHouse's HTTP port (8123, what curl
// and the docs' examples use) was waited for as a server that is down:
// the native handshake times out there at every try, for the whole start
// wait (60 s), which then ended in "handshake: failed to read packet ...
// i/o timeout". The port answers HTTP: the start ends at the first try,
// saying which port to give.
func TestClickHouseGivenItsHTTPPortIsRefusedAtOnce(t *testing.T) {
	ch := testserver.SharedClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := waitClickHouse(ctx, store.ClickHouseConfig{Addrs: []string{ch.HTTPAddr}, Database: "chat_httpport", DialTimeout: 2 * time.Second}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "CHAT_CLICKHOUSE_ADDRS names "+ch.HTTPAddr+", which answers /ping as ClickHouse's HTTP interface does") || !strings.Contains(err.Error(), "set it to the native port") {
		t.Fatalf("ClickHouse at its HTTP port %s: %v; want it named as the HTTP port, with the port to set", ch.HTTPAddr, err)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("the refusal came after %v; want it at the first try, not after the start wait", waited)
	}
	// Its native port answers HTTP too, but as no HTTP interface.
	if addr := clickHouseHTTPPort(ctx, store.ClickHouseConfig{Addrs: []string{ch.Addr}}); addr != "" {
		t.Errorf("the native port %s taken for the HTTP interface", ch.Addr)
	}
}

// A store's setting naming an HTTP server (the gateway's port, a web
// server, ClickHouse's ports) was waited for as a store that is down, the
// whole start wait (60 s): Redis's client said `can't parse map reply:
// "HTTP/1.1 400 Bad Request"`, Kafka's "context deadline exceeded; is the
// broker up?". An address that answers HTTP is no broker nor Redis: the
// start ends at the first try, naming the setting.
func TestAStoreAddressThatAnswersHTTPIsRefusedAtOnce(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	addr := strings.TrimPrefix(web.URL, "http://")
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	start := time.Now()
	s := &settings{RedisAddrs: addr}
	rc, err := s.redisClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	err = waitRedis(ctx, rc, s, log)
	if want := "CHAT_REDIS_ADDRS names " + addr + ", which answers HTTP (404 Not Found): an HTTP server, not the store; set it to redis-server's port"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Redis at an HTTP server: %v; want %q", err, want)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("Redis at an HTTP server: refused after %v; want it at the first try", waited)
	}

	start = time.Now()
	err = waitKafka(ctx, topics.Config{Brokers: []string{addr}, Partitions: 1}, log)
	if want := "CHAT_KAFKA_BROKERS names " + addr + ", which answers HTTP (404 Not Found): an HTTP server, not the store; set it to the brokers' Kafka listeners"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Kafka at an HTTP server: %v; want %q", err, want)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("Kafka at an HTTP server: refused after %v; want it at the first try", waited)
	}
}
