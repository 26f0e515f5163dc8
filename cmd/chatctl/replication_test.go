package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/groupchat/chatd/internal/testserver"
)

// ctlOn runs chatctl with vars as its environment and returns what it
// wrote to stdout and stderr together.
func ctlOn(t *testing.T, vars map[string]string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, args, func(k string) string { return vars[k] }, &out, &out)
	return out.String(), err
}

// `chatctl topics create` makes the topics with CHAT_REPLICATION_FACTOR
// replicas and min.insync.replicas one fewer, describe shows both, and
// verify warns of topics with fewer replicas than it is asked for (and
// than the cluster's 5 brokers can hold).
func TestTopicsCreateTakesTheReplicationFactor(t *testing.T) {
	cl, err := kfake.NewCluster(kfake.NumBrokers(5))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	vars := map[string]string{"CHAT_KAFKA_BROKERS": strings.Join(cl.ListenAddrs(), ","), "CHAT_PARTITIONS": "2", "CHAT_REPLICATION_FACTOR": "3"}
	if out, err := ctlOn(t, vars, "topics", "create"); err != nil {
		t.Fatalf("topics create: %v\n%s", err, out)
	}
	out, err := ctlOn(t, vars, "topics", "describe")
	desc := strings.Join(strings.Fields(out), " ")
	if err != nil || !strings.Contains(desc, "PARTITIONS REPLICAS CONFIGS") || !strings.Contains(desc, "chat.messages true 2 3 ") ||
		strings.Count(desc, "min.insync.replicas=2") != 5 {
		t.Fatalf("topics describe: %v; want 3 replicas and min.insync.replicas=2 for each topic:\n%s", err, out)
	}
	if out, err := ctlOn(t, vars, "topics", "verify"); err != nil {
		t.Fatalf("topics verify of topics made as asked: %v\n%s", err, out)
	}
	out, err = ctlOn(t, vars, "topics", "verify", "-replication-factor", "5")
	if err == nil || !strings.Contains(out, "warning: chat.messages: has replication factor 3 and min.insync.replicas 2, CHAT_REPLICATION_FACTOR (-replication-factor) asks for 5") {
		t.Fatalf("topics verify asking for 5 replicas of 3: %v; want a warning:\n%s", err, out)
	}
}

// A factor that cannot be meant is refused, naming the variable, with an
// example.
func TestTopicsRefuseAReplicationFactorOutOfRange(t *testing.T) {
	for _, args := range [][]string{
		{"topics", "create", "-replication-factor", "-1"},
		{"topics", "verify", "-replication-factor", "8"},
	} {
		_, err := ctlOn(t, map[string]string{"CHAT_KAFKA_BROKERS": "127.0.0.1:9"}, args...)
		if err == nil || !strings.Contains(err.Error(), "(CHAT_REPLICATION_FACTOR / -replication-factor)") ||
			!strings.Contains(err.Error(), "e.g. CHAT_REPLICATION_FACTOR=3") {
			t.Errorf("chatctl %v: %v; want a refusal naming CHAT_REPLICATION_FACTOR with an example", args, err)
		}
	}
}

// On existing topics of one broker, CHAT_REPLICATION_FACTOR=3 is refused
// by verify and create alike, naming the broker count and what to set:
// no reassignment plan of 3 brokers, no "topics ready".
func TestTopicsRefuseAFactorAboveTheBrokers(t *testing.T) {
	b := testserver.NewBroker(t)
	vars := map[string]string{"CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_PARTITIONS": "2"}
	if out, err := ctlOn(t, vars, "topics", "create"); err != nil {
		t.Fatalf("topics create: %v\n%s", err, out)
	}
	vars["CHAT_REPLICATION_FACTOR"] = "3"
	for _, cmd := range []string{"verify", "create"} {
		out, err := ctlOn(t, vars, "topics", cmd)
		if err == nil || !strings.Contains(err.Error(), "the cluster has 1 broker(s)") || !strings.Contains(err.Error(), "CHAT_REPLICATION_FACTOR=1") ||
			strings.Contains(out, "kafka-reassign-partitions.sh") || strings.Contains(out, "topics ready") {
			t.Errorf("CHAT_REPLICATION_FACTOR=3 chatctl topics %s on one broker: %v; want a refusal naming the count and the setting:\n%s", cmd, err, out)
		}
	}
}
