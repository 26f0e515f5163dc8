package topics

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/internal/testserver"
)

// startCluster starts a kfake cluster of n brokers for the test; the
// embedded broker is one node, which holds one replica only.
func startCluster(t *testing.T, n int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// created is what the CreateTopics requests a cluster answered asked for,
// by topic.
type created struct {
	mu     sync.Mutex
	topics map[string]kmsg.CreateTopicsRequestTopic
}

func watchCreates(c *kfake.Cluster) *created {
	w := &created{topics: map[string]kmsg.CreateTopicsRequestTopic{}}
	c.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, t := range req.(*kmsg.CreateTopicsRequest).Topics {
			w.topics[t.Topic] = t
		}
		return nil, nil, false
	})
	return w
}

func (w *created) get(topic string) (kmsg.CreateTopicsRequestTopic, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.topics[topic]
	return t, ok
}

// replicasOf is the fewest replicas of any partition of topic.
func replicasOf(t *testing.T, client *kafka.Client, topic string) int {
	t.Helper()
	md, err := client.Metadata(context.Background(), &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) == 0 {
		t.Fatalf("metadata of %s: %v %+v", topic, err, md)
	}
	n := len(md.Topics[0].Partitions[0].Replicas)
	for _, p := range md.Topics[0].Partitions {
		n = min(n, len(p.Replicas))
	}
	return n
}

func configOf(t kmsg.CreateTopicsRequestTopic, name string) (string, bool) {
	for _, c := range t.Configs {
		if c.Name == name && c.Value != nil {
			return *c.Value, true
		}
	}
	return "", false
}

// The topics are created with the replication factor asked for and a
// min.insync.replicas one below it, so that RequireAll acks wait for
// copies on other brokers; unset, the broker's default is asked for, as
// before, and no min.insync.replicas.
func TestEnsureAsksForTheReplicationFactorAndMinInsync(t *testing.T) {
	for _, c := range []struct {
		factor, wantFactor int16
		wantInsync         string // "": none asked for
	}{
		{0, -1, ""},
		{1, 1, ""},
		{2, 2, "1"},
		{3, 3, "2"},
	} {
		cl := startCluster(t, 3)
		w := watchCreates(cl)
		cfg := Config{Brokers: cl.ListenAddrs(), Partitions: 2, ReplicationFactor: int(c.factor)}
		var logged bytes.Buffer
		if err := Ensure(context.Background(), cfg, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
			t.Fatalf("Ensure with replication factor %d: %v", c.factor, err)
		}
		for _, s := range Specs(cfg) {
			req, ok := w.get(s.Name)
			if !ok {
				t.Fatalf("no CreateTopics request for %s", s.Name)
			}
			insync, set := configOf(req, "min.insync.replicas")
			if req.ReplicationFactor != c.wantFactor || insync != c.wantInsync || set != (c.wantInsync != "") {
				t.Errorf("replication factor %d: %s asked for with replication factor %d and min.insync.replicas %q (set %v); want %d and %q",
					c.factor, s.Name, req.ReplicationFactor, insync, set, c.wantFactor, c.wantInsync)
			}
		}
		if c.factor < 2 {
			continue
		}
		client := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(cl.ListenAddrs()...)}
		states, err := Describe(context.Background(), client, Specs(cfg))
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range states {
			if n := replicasOf(t, client, st.Name); n != int(c.factor) || st.Configs["min.insync.replicas"] != c.wantInsync {
				t.Errorf("%s made with %d replicas and min.insync.replicas %q; want %d and %q",
					st.Name, n, st.Configs["min.insync.replicas"], c.factor, c.wantInsync)
			}
		}
		if strings.Contains(logged.String(), "level=WARN") {
			t.Errorf("Ensure warned of topics it made as asked:\n%s", logged.String())
		}
	}
}

// Topics made before the setting (here with one replica on a cluster of
// three) are not refused: chatd starts, and the log names each topic, what
// it has, and what to run or set.
func TestEnsureWarnsOfTopicsWithFewerReplicas(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	if err := Ensure(ctx, Config{Brokers: cl.ListenAddrs(), Partitions: 2, ReplicationFactor: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	cfg := Config{Brokers: cl.ListenAddrs(), Partitions: 2, ReplicationFactor: 3}
	if err := Ensure(ctx, cfg, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatalf("Ensure over topics of one replica: %v; want a warning, not a refusal", err)
	}
	lines := strings.Split(logged.String(), "\n")
	for _, s := range Specs(cfg) {
		var line string
		for _, l := range lines {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "topic="+s.Name+" ") {
				line = l
			}
		}
		for _, want := range []string{
			"has replication factor 1 and min.insync.replicas 1",
			"CHAT_REPLICATION_FACTOR (-replication-factor) asks for 3",
			"kafka-reassign-partitions.sh", "--entity-name " + s.Name + " --add-config min.insync.replicas=2",
			"set CHAT_REPLICATION_FACTOR=1",
		} {
			if !strings.Contains(line, want) {
				t.Errorf("%s: the warning lacks %q:\n%s", s.Name, want, logged.String())
				break
			}
		}
	}
}

// Topics with replicas enough but min.insync.replicas 1 (the broker's
// default) acknowledge a record on one disk: Verify says so, and how to
// raise it.
func TestVerifyWarnsOfALowMinInsync(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	client := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(cl.ListenAddrs()...)}
	_, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: Messages, NumPartitions: 2, ReplicationFactor: 3,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "delete"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	specs := Specs(Config{Brokers: cl.ListenAddrs(), Partitions: 2, ReplicationFactor: 3})[:1]
	states, err := Describe(ctx, client, specs)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range Verify(specs, states) {
		if p.Fatal {
			t.Errorf("a fatal problem: %s", p)
		}
		found = append(found, p.String())
	}
	got := strings.Join(found, "\n")
	if !strings.Contains(got, `chat.messages: has replication factor 3 and min.insync.replicas "1", CHAT_REPLICATION_FACTOR=3 asks for min.insync.replicas 2`) ||
		!strings.Contains(got, "--entity-name chat.messages --add-config min.insync.replicas=2") {
		t.Errorf("Verify of a topic of 3 replicas with min.insync.replicas 1:\n%s\nwant the difference and the kafka-configs command", got)
	}
}

// A factor the cluster cannot hold ends the start with the number of
// brokers it has and the setting to change.
func TestEnsureSaysWhenTheClusterHasTooFewBrokers(t *testing.T) {
	b := testserver.NewBroker(t)
	err := Ensure(context.Background(), Config{Brokers: []string{b.Addr()}, Partitions: 2, ReplicationFactor: 3}, nil)
	if err == nil || !strings.Contains(err.Error(), "the cluster has 1 broker(s): set CHAT_REPLICATION_FACTOR (-replication-factor) to at most that") {
		t.Fatalf("Ensure with replication factor 3 on one broker: %v; want the broker count and the setting", err)
	}
}

// A replication factor that cannot be meant is refused before any broker
// is asked, naming the variable and giving an example.
func TestValidateRefusesAReplicationFactorOutOfRange(t *testing.T) {
	for _, n := range []int{-1, 8, 300} {
		err := Config{Brokers: []string{"kafka:9092"}, ReplicationFactor: n}.Validate()
		if err == nil || !strings.Contains(err.Error(), "CHAT_REPLICATION_FACTOR") || !strings.Contains(err.Error(), "e.g. CHAT_REPLICATION_FACTOR=3") {
			t.Errorf("replication factor %d: %v; want a refusal naming CHAT_REPLICATION_FACTOR with an example", n, err)
		}
	}
	for _, n := range []int{0, 1, 3, 7} {
		if err := (Config{Brokers: []string{"kafka:9092"}, ReplicationFactor: n}).Validate(); err != nil {
			t.Errorf("replication factor %d refused: %v", n, err)
		}
	}
}

// With no factor set, topics the broker's default made of one replica on
// a cluster of several brokers are named in the log.
func TestEnsureWarnsOfUnreplicatedTopicsWhenNoFactorIsSet(t *testing.T) {
	cl := startCluster(t, 3)
	ctx := context.Background()
	if err := Ensure(ctx, Config{Brokers: cl.ListenAddrs(), Partitions: 2, ReplicationFactor: 1}, nil); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	if err := Ensure(ctx, Config{Brokers: cl.ListenAddrs(), Partitions: 2}, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logged.String(), "topic has one replica on a cluster of several brokers"); n != 5 ||
		!strings.Contains(logged.String(), "set CHAT_REPLICATION_FACTOR=3") {
		t.Errorf("%d warnings of unreplicated topics, want 5 naming CHAT_REPLICATION_FACTOR=3:\n%s", n, logged.String())
	}
}

// A factor above the cluster's brokers is refused for topics that exist
// too: on one broker, CHAT_REPLICATION_FACTOR=3 cannot be met by adding
// replicas, so Ensure names the count and what to set rather than
// warning of a reassignment the cluster cannot run.
func TestEnsureRefusesAFactorAboveTheBrokersForExistingTopics(t *testing.T) {
	b := testserver.NewBroker(t)
	ctx := context.Background()
	if err := Ensure(ctx, Config{Brokers: []string{b.Addr()}, Partitions: 2}, nil); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	err := Ensure(ctx, Config{Brokers: []string{b.Addr()}, Partitions: 2, ReplicationFactor: 3}, slog.New(slog.NewTextHandler(&logged, nil)))
	if err == nil || !strings.Contains(err.Error(), "the cluster has 1 broker(s): set CHAT_REPLICATION_FACTOR (-replication-factor) to at most that") ||
		!strings.Contains(err.Error(), "CHAT_REPLICATION_FACTOR=1") {
		t.Fatalf("Ensure with replication factor 3 over topics on one broker: %v; want the broker count and the setting\n%s", err, logged.String())
	}
	if strings.Contains(logged.String(), "kafka-reassign-partitions.sh") {
		t.Errorf("Ensure told to add replicas the cluster cannot hold:\n%s", logged.String())
	}
}

// Check is what `chatctl topics verify` runs: the same refusal, before any
// per-topic difference; a factor the cluster holds gives the differences.
func TestCheckRefusesAFactorAboveTheBrokers(t *testing.T) {
	cl := startCluster(t, 2)
	ctx := context.Background()
	if err := Ensure(ctx, Config{Brokers: cl.ListenAddrs(), Partitions: 2, ReplicationFactor: 1}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := Check(ctx, Config{Brokers: cl.ListenAddrs(), Partitions: 2, ReplicationFactor: 3})
	if !errors.Is(err, ErrTooFewBrokers) || !strings.Contains(err.Error(), "the cluster has 2 broker(s)") ||
		!strings.Contains(err.Error(), "CHAT_REPLICATION_FACTOR=2") {
		t.Fatalf("Check with replication factor 3 on two brokers: %v; want %v naming the count and the setting", err, ErrTooFewBrokers)
	}
	problems, err := Check(ctx, Config{Brokers: cl.ListenAddrs(), Partitions: 2, ReplicationFactor: 2})
	if err != nil || len(problems) != 5 || !strings.Contains(problems[0].Detail, "kafka-reassign-partitions.sh") {
		t.Fatalf("Check with replication factor 2 on two brokers: %v, %v; want a warning per topic to add replicas", problems, err)
	}
}
