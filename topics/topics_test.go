package topics

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
)

func startBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b := testserver.NewBroker(t)
	return b
}

func TestEnsureCreatesThenVerifies(t *testing.T) {
	b := startBroker(t)
	ctx := context.Background()
	cfg := Config{Brokers: []string{b.Addr()}, Partitions: 6}
	if err := Ensure(ctx, cfg, nil); err != nil {
		t.Fatalf("first Ensure: %v", err)
	}
	if err := Ensure(ctx, cfg, nil); err != nil {
		t.Fatalf("second Ensure on existing topics: %v", err)
	}
	client := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(b.Addr())}
	states, err := Describe(ctx, client, Specs(cfg))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range Specs(cfg) {
		st := states[i]
		if !st.Exists || st.Partitions != 6 {
			t.Errorf("%s: exists=%v partitions=%d, want 6", s.Name, st.Exists, st.Partitions)
		}
		if st.Configs["cleanup.policy"] != s.CleanupPolicy() {
			t.Errorf("%s: cleanup.policy %q, want %q", s.Name, st.Configs["cleanup.policy"], s.CleanupPolicy())
		}
	}
	if got := states[0].Configs["retention.ms"]; got != strconv.FormatInt((7*24*time.Hour).Milliseconds(), 10) {
		t.Errorf("chat.messages retention.ms = %q", got)
	}
}

func TestEnsureRefusesPartitionMismatch(t *testing.T) {
	b := startBroker(t)
	ctx := context.Background()
	if err := Ensure(ctx, Config{Brokers: []string{b.Addr()}, Partitions: 4}, nil); err != nil {
		t.Fatal(err)
	}
	err := Ensure(ctx, Config{Brokers: []string{b.Addr()}, Partitions: 8}, nil)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("Ensure with a different partition count: %v, want ErrMismatch", err)
	}
	t.Log(err)
	client := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(b.Addr())}
	states, _ := Describe(ctx, client, Specs(Config{Brokers: []string{b.Addr()}}))
	for _, st := range states {
		if st.Partitions != 4 {
			t.Errorf("%s changed to %d partitions", st.Name, st.Partitions)
		}
	}
}

func TestEnsureRefusesCleanupPolicyMismatch(t *testing.T) {
	b := startBroker(t)
	ctx := context.Background()
	client := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(b.Addr())}
	_, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: Acks, NumPartitions: 3, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "delete"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	err = Ensure(ctx, Config{Brokers: []string{b.Addr()}, Partitions: 3}, nil)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("Ensure over a delete-policy chat.acks: %v, want ErrMismatch", err)
	}
}

func TestBalancerMatchesJavaMurmur2(t *testing.T) {
	// Without "/" our balancer must agree with kafka-go's port of the Java
	// client's murmur2 partitioner.
	java := kafka.Murmur2Balancer{Consistent: true}
	parts := make([]int, 16)
	for i := range parts {
		parts[i] = i
	}
	for i := 0; i < 2000; i++ {
		gid := "g" + strconv.Itoa(i*7919)
		want := java.Balance(kafka.Message{Key: []byte(gid)}, parts...)
		if got := (Balancer{}).Balance(kafka.Message{Key: []byte(gid)}, parts...); got != want {
			t.Fatalf("gid %s: partition %d, Java murmur2 says %d", gid, got, want)
		}
		if got := (Balancer{}).Balance(kafka.Message{Key: []byte(gid + "/u1")}, parts...); got != want {
			t.Fatalf("key %s/u1: partition %d, its gid is in %d", gid, got, want)
		}
		if got := Partition(gid, 16); got != want {
			t.Fatalf("Partition(%s) = %d, want %d", gid, got, want)
		}
	}
	// Known value from the Java client: murmur2("21") as used by Kafka tests.
	if h := int32(murmur2([]byte("21"))); h != -973932308 {
		t.Errorf("murmur2(\"21\") = %d, want -973932308", h)
	}
}

// A system whose chat.messages was made with another partition count gets
// no new topics from a mismatched Ensure: a topic created then would carry
// the wrong count for good, and the count the error says to set would then
// mismatch it.
func TestEnsureCreatesNothingBesideAMismatchedTopic(t *testing.T) {
	b := startBroker(t)
	ctx := context.Background()
	client := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(b.Addr())}
	_, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: Messages, NumPartitions: 4, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "delete"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Ensure(ctx, Config{Brokers: []string{b.Addr()}, Partitions: 8}, nil); !errors.Is(err, ErrMismatch) {
		t.Fatalf("Ensure with 8 partitions over a 4-partition chat.messages: %v, want ErrMismatch", err)
	}
	states, err := Describe(ctx, client, Specs(Config{Brokers: []string{b.Addr()}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states[1:] {
		if st.Exists {
			t.Errorf("%s was created with %d partitions beside a mismatched %s", st.Name, st.Partitions, Messages)
		}
	}
	// The fix the error names works: the configured count set to the
	// existing one makes the rest with it.
	if err := Ensure(ctx, Config{Brokers: []string{b.Addr()}, Partitions: 4}, nil); err != nil {
		t.Fatalf("Ensure with the existing count: %v", err)
	}
}

// TestEnsureLeavesNoKafkaConnectionsBehind: Ensure runs once at start. The
// pool of its connections must not outlive it, asking the brokers for
// metadata for as long as the process lives.
func TestEnsureLeavesNoKafkaConnectionsBehind(t *testing.T) {
	b := startBroker(t)
	before := testserver.GoroutinesNow()
	if err := Ensure(context.Background(), Config{Brokers: []string{b.Addr()}, Partitions: 2}, nil); err != nil {
		t.Fatal(err)
	}
	before.WaitGone(t, "kafka-go.(*connPool).discover", 5*time.Second)
}

// Without ClickHouse chat.messages is the only copy of the history: a
// topic that deletes messages after a week (made by a deployment with
// ClickHouse) is refused, naming the settings, rather than warned of
// while the messages it deletes are lost. With ClickHouse it is the
// deployment's choice, and a warning.
func TestEnsureRefusesADeletingMessagesTopicWhenTheLogIsTheHistory(t *testing.T) {
	b := startBroker(t)
	ctx := context.Background()
	if err := Ensure(ctx, Config{Brokers: []string{b.Addr()}, Partitions: 2}, nil); err != nil {
		t.Fatal(err)
	}
	forever := Config{Brokers: []string{b.Addr()}, Partitions: 2, MessageRetention: -1}
	if err := Ensure(ctx, forever, nil); err != nil {
		t.Fatalf("a role with ClickHouse asking to keep everything, on a topic of a week: %v, want a warning only", err)
	}
	for ms, want := range map[string]bool{"-1": false, "9223372036854775807": false, "604800000": true, "0": true, "": true} {
		if deletes(ms) != want {
			t.Errorf("retention.ms %q deletes records: %v, want %v", ms, !want, want)
		}
	}
	forever.LogIsHistory = true
	err := Ensure(ctx, forever, nil)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "deletes messages after 168h0m0s") || !strings.Contains(err.Error(), "CHAT_CLICKHOUSE_ADDRS") {
		t.Fatalf("a role without ClickHouse on a chat.messages of a week: %v, want ErrMismatch naming the retention and CHAT_CLICKHOUSE_ADDRS", err)
	}
}
