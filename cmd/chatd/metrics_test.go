package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/topics"
)

// TestMetricsAfterALoad runs `chatd dev` in process, with ClickHouse, puts a small load
// through the gateway (a group, one member online over WebSocket, five
// sends over HTTP, one poison record) and checks that /metrics shows each
// named series with the values that load must give, then that SIGTERM
// (the run's ctx) stops it within the shutdown deadline.
func TestMetricsAfterALoad(t *testing.T) {
	httpAddr, kafkaAddr := freeAddr(t), freeAddr(t)
	const admin = "admin-token-for-the-metrics-test-0123456789"
	env := map[string]string{
		"CHAT_HTTP_ADDR": httpAddr, "CHAT_KAFKA_LISTEN": kafkaAddr, "CHAT_DATA_DIR": t.TempDir(),
		"CHAT_PARTITIONS": "2", "CHAT_ADMIN_TOKEN": admin, "CHAT_SHUTDOWN_TIMEOUT": "5s", "CHAT_LOG_LEVEL": "warn",
		"CHAT_CLICKHOUSE_ADDRS":    testserver.SharedClickHouse(t).Addr,
		"CHAT_CLICKHOUSE_DATABASE": fmt.Sprintf("metrics%d", time.Now().UnixNano()%1e9),
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"dev"}, func(k string) string { return env[k] }) }()
	base := "http://" + httpAddr
	waitHealthy(t, base+"/readyz")

	post := func(path, token, body string) []byte {
		t.Helper()
		st, b := api(t, "POST", base+path, token, body)
		if st != 200 {
			t.Fatalf("POST %s: %d %s", path, st, b)
		}
		return b
	}
	token := func(uid string) string {
		var tok struct{ Token string }
		json.Unmarshal(post("/v1/dev/token", "", `{"uid":"`+uid+`"}`), &tok)
		return tok.Token
	}
	post("/v1/admin/groups", admin, `{"gid":"team","members":["alice","bob"]}`)
	alice, bob := token("alice"), token("bob")

	ws, _, err := websocket.Dial(ctx, "ws://"+httpAddr+"/v1/ws?token="+bob, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	// bob's membership must have reached the projection before sends
	// count on being pushed to him: sync lists the group once it has.
	waitMetric(t, "bob's membership", func() bool {
		req, _ := http.NewRequest("GET", base+"/v1/sync", nil)
		req.Header.Set("Authorization", "Bearer "+bob)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return bytes.Contains(b, []byte(`"team"`))
	})
	time.Sleep(2500 * time.Millisecond) // the fan-out caches presence for 2 s

	const sends = 5
	for i := range sends {
		post("/v1/groups/team/messages", alice, fmt.Sprintf(`{"cmid":"c%d","body":"hello %d"}`, i, i))
	}
	pushed := 0
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for pushed < sends {
		_, frame, err := ws.Read(rctx)
		if err != nil {
			t.Fatalf("bob got %d of %d pushes: %v", pushed, sends, err)
		}
		var f struct {
			Op   string
			Msgs []json.RawMessage
		}
		json.Unmarshal(frame, &f)
		if f.Op == "push" {
			pushed += len(f.Msgs)
		}
	}
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(kafkaAddr), Topic: topics.Acks, Balancer: topics.Balancer{}, RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("team/bob"), Value: []byte{1, 2, 0xff}}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	var fams map[string]*dto.MetricFamily
	value := func(name string, labels map[string]string) (float64, bool) {
		for _, m := range fams[name].GetMetric() {
			match := true
			for k, v := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == k && l.GetValue() == v
				}
				match = match && found
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
		return 0, false
	}
	histSum := func(name string, labels map[string]string) float64 {
		for _, m := range fams[name].GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == labels[m.GetLabel()[0].GetName()] {
				return m.GetHistogram().GetSampleSum()
			}
		}
		return -1
	}
	scrape := func() {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		if fams, err = p.TextToMetricFamilies(resp.Body); err != nil {
			t.Fatal(err)
		}
	}
	waitMetric(t, "the dead letter to be counted", func() bool {
		scrape()
		v, _ := value("chat_deadletter_total", map[string]string{"topic": topics.Acks})
		return v == 1
	})

	checks := []struct {
		what   string
		name   string
		labels map[string]string
		want   func(float64) bool
		needs  string
	}{
		{"sends accepted", "chat_sends_total", nil, eqTo(sends), "gateway"},
		{"pushes to bob's connection", "chat_pushes_total", nil, eqTo(sends), "gateway"},
		{"one e2e latency per push", "chat_e2e_latency_seconds", nil, eqTo(sends), "gateway"},
		{"bob's open connection", "chat_connections", nil, eqTo(1), "gateway"},
		{"records the persister handled", "chat_consumer_records_total", map[string]string{"group": "chat.persister"}, eqTo(sends), "runner"},
		{"records the fan-out handled", "chat_consumer_records_total", map[string]string{"group": "chat.fanout"}, eqTo(sends), "runner"},
		{"persister batches", "chat_batch_size", map[string]string{"group": "chat.persister"}, between(1, sends), "runner"},
		{"the persister's lag on team's partition", "chat_consumer_lag", map[string]string{"group": "chat.persister", "partition": fmt.Sprint(topics.Partition("team", 2))}, eqTo(0), "runner"},
		{"the poison ack dead-lettered", "chat_deadletter_total", map[string]string{"topic": topics.Acks}, eqTo(1), "runner"},
		{"Redis pipelines timed", "chat_store_seconds", map[string]string{"store": "redis", "op": "pipeline"}, atLeast(1), "redis hook"},
		{"ClickHouse message inserts timed", "chat_store_seconds", map[string]string{"store": "clickhouse", "op": "insert messages"}, between(1, sends), "ClickHouse store"},
	}
	for _, c := range checks {
		v, ok := value(c.name, c.labels)
		if !ok || !c.want(v) {
			t.Errorf("%s: %s%v = %v (present %v) [fed by the %s]", c.what, c.name, c.labels, v, ok, c.needs)
		}
	}
	if s := histSum("chat_batch_size", map[string]string{"group": "chat.persister"}); s != sends {
		t.Errorf("chat_batch_size{group=chat.persister} sums to %v records, want %d", s, sends)
	}
	if lat := fams["chat_e2e_latency_seconds"].GetMetric(); len(lat) == 1 {
		if s := lat[0].GetHistogram().GetSampleSum(); s <= 0 || s > 30*sends {
			t.Errorf("e2e latencies sum to %v s for %d pushes", s, sends)
		}
	}

	// SIGTERM: run's ctx ends; the open connection is closed with "going
	// away" (bob's client answers the close) and the process stops within
	// the deadline.
	closed := make(chan error, 1)
	go func() {
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				closed <- err
				return
			}
		}
	}()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chatd dev returned %v on shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("chatd dev did not stop within 10 s of its shutdown signal")
	}
	if err := <-closed; websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("bob's connection ended with %v, want going away", err)
	}
}

func eqTo(want float64) func(float64) bool    { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }
func between(lo, hi float64) func(float64) bool {
	return func(v float64) bool { return v >= lo && v <= hi }
}

func waitMetric(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
