package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/topics"
)

// CHAT_REPLICATION_FACTOR reaches the topics a production role creates:
// on a cluster of three brokers, three replicas each and
// min.insync.replicas 2, so that an acknowledged message is on two disks.
func TestAProductionRoleCreatesTopicsWithTheReplicationFactor(t *testing.T) {
	cl, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	redis := testserver.NewRedis(t)
	addr := freeAddr(t)
	brokers := strings.Join(cl.ListenAddrs(), ",")
	env := map[string]string{
		"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": brokers, "CHAT_REDIS_ADDRS": redis.Addr,
		"CHAT_PARTITIONS": "2", "CHAT_REPLICATION_FACTOR": "3", "CHAT_LOG_LEVEL": "warn",
	}
	var logs testserver.Output
	stop := runRole(t, "projector", env, &logs)
	waitHealthy(t, "http://"+addr+"/healthz")
	stop()

	client := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(cl.ListenAddrs()...)}
	specs := topics.Specs(topics.Config{Brokers: cl.ListenAddrs(), Partitions: 2})
	states, err := topics.Describe(context.Background(), client, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if st.ReplicationFactor != 3 || st.Configs["min.insync.replicas"] != "2" {
			t.Errorf("%s: replication factor %d, min.insync.replicas %q; want 3 and 2", st.Name, st.ReplicationFactor, st.Configs["min.insync.replicas"])
		}
	}
	if strings.Contains(logs.String(), "WARN") {
		t.Errorf("the projector warned of topics it made as asked:\n%s", logs.String())
	}
}

// A factor that cannot be meant is refused before anything starts, naming
// the variable and giving an example; chatd dev, one embedded broker,
// refuses a factor it cannot hold.
func TestAReplicationFactorItCannotHoldIsRefused(t *testing.T) {
	for _, c := range []struct {
		role  string
		args  []string
		value string // of CHAT_REPLICATION_FACTOR
		want  string // "": taken
	}{
		{"gateway", nil, "3", ""},
		{"persister", nil, "0", ""},
		{"projector", nil, "-1", "replication-factor -1 is out of range 0..7 (CHAT_REPLICATION_FACTOR / -replication-factor)"},
		{"fanout", nil, "8", "e.g. CHAT_REPLICATION_FACTOR=3 on a cluster of three brokers or more"},
		{"gateway", []string{"-replication-factor", "100"}, "", "replication-factor 100 is out of range"},
		{"gateway", nil, "three", `CHAT_REPLICATION_FACTOR="three"`},
		{"dev", nil, "1", ""},
		{"dev", nil, "3", "replication-factor 3 (CHAT_REPLICATION_FACTOR): chatd dev runs one embedded broker"},
	} {
		env := map[string]string{"CHAT_KAFKA_BROKERS": "kafka:9092", "CHAT_REPLICATION_FACTOR": c.value}
		if c.role == "dev" {
			delete(env, "CHAT_KAFKA_BROKERS")
		}
		_, err := parseSettings(c.role, c.args, func(k string) string { return env[k] }, io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("chatd %s %v with CHAT_REPLICATION_FACTOR=%q: %v; want it taken", c.role, c.args, c.value, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("chatd %s %v with CHAT_REPLICATION_FACTOR=%q: error %v; want one saying %q", c.role, c.args, c.value, err, c.want)
		}
	}
}

// A factor above the brokers that answer is waited for (a cluster may be
// starting), but the end of the wait says what the refusal says: add
// brokers or lower the factor. It added "check CHAT_KAFKA_BROKERS and
// that the brokers run; ... set CHAT_KAFKA_TLS=true", for brokers that
// ran and answered.
func TestTooFewBrokersEndTheWaitSayingWhatToSet(t *testing.T) {
	old := startWait
	startWait = 3 * time.Second
	t.Cleanup(func() { startWait = old })
	b := testserver.NewBroker(t)
	cfg := topics.Config{Brokers: []string{b.Addr()}, Partitions: 2, ReplicationFactor: 3}
	err := waitKafka(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "CHAT_REPLICATION_FACTOR=1") || strings.Contains(err.Error(), "CHAT_KAFKA_TLS") {
		t.Fatalf("a factor of 3 on one broker: %v; want the refusal saying CHAT_REPLICATION_FACTOR=1, without the TLS hint", err)
	}
}
