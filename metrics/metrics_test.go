package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNilSetDoesNothing(t *testing.T) {
	var s *Set
	s.Sent(1)
	s.Pushed(1)
	s.Delivered([]byte(`{"op":"push","msgs":[{"sent_at":1}]}`), 1, time.Now())
	s.ConnOpened()
	s.ConnClosed()
	s.Consumed("g", 3)
	s.Lag("g", 0, 5)
	s.ForgetLag("g")
	s.Retried("g")
	s.DeadLettered("t")
	s.ObserveStore("redis", "get", time.Millisecond)
	s.TimeStore("redis", "get")()
	if s.RedisHook() == nil {
		t.Fatal("a nil set still gives a hook that passes calls on")
	}
}

func TestSeriesCountWhatHappened(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg); err == nil {
		t.Fatal("registering the series twice on one registry succeeded")
	}
	now := time.UnixMilli(10_000)
	s.Sent(2)
	s.Delivered([]byte(`{"op":"push","msgs":[{"gid":"g","msgid":1,"sender":"u","sent_at":9000,"body":"\"sent_at\":1"},`+
		`{"gid":"g","msgid":2,"sender":"u","sent_at":9500}]}`), 2, now)
	s.ConnOpened()
	s.ConnOpened()
	s.ConnClosed()
	s.Consumed("chat.persister", 7)
	s.Consumed("chat.persister", 3)
	s.Lag("chat.persister", 2, 40)
	s.Lag("chat.persister", 3, -1) // unknown: shown as 0
	s.DeadLettered("chat.acks")
	s.Resynced("push_route", 3)
	s.Resynced("late_store", 1)

	for name, want := range map[string]float64{
		"chat_sends_total":  2,
		"chat_pushes_total": 2,
		"chat_connections":  1,
	} {
		if got := testutil.ToFloat64(map[string]prometheus.Collector{"chat_sends_total": s.sends, "chat_pushes_total": s.pushes, "chat_connections": s.connections}[name]); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := testutil.ToFloat64(s.records.WithLabelValues("chat.persister")); got != 10 {
		t.Errorf("records = %v, want 10", got)
	}
	if got := testutil.ToFloat64(s.lag.WithLabelValues("chat.persister", "2")); got != 40 {
		t.Errorf("lag of partition 2 = %v, want 40", got)
	}
	if got := testutil.ToFloat64(s.resyncs.WithLabelValues("push_route")); got != 3 {
		t.Errorf("push_route resyncs = %v, want 3", got)
	}
	if got := testutil.ToFloat64(s.deadletter.WithLabelValues("chat.acks")); got != 1 {
		t.Errorf("dead letters = %v, want 1", got)
	}
	// The e2e latencies are 1 s and 0.5 s: from sent_at, not from the
	// "sent_at" inside an escaped body.
	err = testutil.CollectAndCompare(s.e2e, strings.NewReader(`
# HELP chat_e2e_latency_seconds From a message's sent_at (taken when the gateway accepted it) to its push written to a recipient's connection.
# TYPE chat_e2e_latency_seconds histogram
chat_e2e_latency_seconds_bucket{le="0.001"} 0
chat_e2e_latency_seconds_bucket{le="0.002"} 0
chat_e2e_latency_seconds_bucket{le="0.005"} 0
chat_e2e_latency_seconds_bucket{le="0.01"} 0
chat_e2e_latency_seconds_bucket{le="0.02"} 0
chat_e2e_latency_seconds_bucket{le="0.05"} 0
chat_e2e_latency_seconds_bucket{le="0.1"} 0
chat_e2e_latency_seconds_bucket{le="0.2"} 0
chat_e2e_latency_seconds_bucket{le="0.5"} 1
chat_e2e_latency_seconds_bucket{le="1"} 2
chat_e2e_latency_seconds_bucket{le="2"} 2
chat_e2e_latency_seconds_bucket{le="5"} 2
chat_e2e_latency_seconds_bucket{le="10"} 2
chat_e2e_latency_seconds_bucket{le="30"} 2
chat_e2e_latency_seconds_bucket{le="+Inf"} 2
chat_e2e_latency_seconds_sum 1.5
chat_e2e_latency_seconds_count 2
`))
	if err != nil {
		t.Error(err)
	}
	s.ForgetLag("chat.persister")
	if n := testutil.CollectAndCount(s.lag); n != 0 {
		t.Errorf("%d lag series left after ForgetLag", n)
	}
}
