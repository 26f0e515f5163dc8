package main

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/groupchat/chatd/topics"
)

// Every counter that docs/operations.md says to alert on is served by a
// fresh `chatd dev` at 0, for each label value it names: a series that
// first appears at 1 shows Prometheus no increase, so the first dead
// letter, retry or refusal would raise no alert.
func TestTheWatchedCountersAreServedFromTheStart(t *testing.T) {
	httpAddr, kafkaAddr := freeAddr(t), freeAddr(t)
	env := map[string]string{
		"CHAT_HTTP_ADDR": httpAddr, "CHAT_KAFKA_LISTEN": kafkaAddr, "CHAT_DATA_DIR": t.TempDir(),
		"CHAT_PARTITIONS": "2", "CHAT_SHUTDOWN_TIMEOUT": "5s", "CHAT_LOG_LEVEL": "warn",
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"dev"}, func(k string) string { return env[k] }) }()
	defer func() { stop(); <-done }()
	base := "http://" + httpAddr
	waitHealthy(t, base+"/readyz")

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	labels := func(name, label string) []string {
		var out []string
		for _, m := range fams[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out = append(out, l.GetValue())
				}
			}
		}
		slices.Sort(out)
		return out
	}

	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var counters []string
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `chat_") {
			continue
		}
		cell := strings.Split(line, "|")[1]
		for _, m := range regexp.MustCompile("`(chat_[a-z_]+_total)").FindAllStringSubmatch(cell, -1) {
			counters = append(counters, m[1])
		}
	}
	if len(counters) < 5 {
		t.Fatalf("found %v in the table of docs/operations.md; the test reads it wrong", counters)
	}
	for _, name := range counters {
		if len(fams[name].GetMetric()) == 0 {
			t.Errorf("%s (docs/operations.md) is not served by a fresh chatd dev", name)
		}
	}

	groups := []string{"chat.ack-projector", "chat.fanout", "chat.member-projector", "chat.persister", "chat.receipt-notifier", "chat.receipt-projector"}
	for _, want := range []struct {
		name, label string
		values      []string
	}{
		{"chat_connections_refused_total", "reason", []string{"authenticating", "catching_up", "presence", "starting", "user_conns"}},
		{"chat_resyncs_total", "reason", []string{"late_store", "presence", "push_route"}},
		{"chat_consumer_retries_total", "group", groups},
		{"chat_consumer_records_total", "group", groups},
		{"chat_deadletter_total", "topic", []string{topics.Acks, topics.Members, topics.Messages, topics.Receipts}},
	} {
		slices.Sort(want.values)
		if got := slices.Compact(labels(want.name, want.label)); !slices.Equal(got, want.values) {
			t.Errorf("%s{%s} served for %v at start, want %v", want.name, want.label, got, want.values)
		}
	}
}
