package topics

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The topic names.
const (
	Messages   = "chat.messages"   // key gid; delete policy; msgid = offset
	Acks       = "chat.acks"       // key gid/uid; compacted; delivery cursors
	Receipts   = "chat.receipts"   // key gid/uid; compacted; read cursors
	Members    = "chat.members"    // key gid/uid; compacted; membership table
	DeadLetter = "chat.deadletter" // records no consumer could decode
)

// Config says how the topics are made. Every process of one deployment must
// use the same Partitions.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Security is how connections to them are made. Default plaintext.
	Security Security

	// Partitions of every chat.* topic. Default 16. It bounds the consumers'
	// parallelism and cannot change later without breaking per-group order:
	// choose it for the largest deployment.
	Partitions int

	// ReplicationFactor of new topics. Default 0: the broker's
	// default.replication.factor, which is 1 on a stock Apache Kafka and
	// right for a single broker only. N >= 1 makes topics of N replicas;
	// N >= 2 sets their min.insync.replicas to MinInsyncReplicas(N), so an
	// acknowledged record is on that many brokers at least. Verify warns of
	// existing topics with fewer replicas, or a lower min.insync.replicas.
	// At most MaxReplicationFactor, and at most the cluster's brokers
	// (Ensure and Check refuse more, for new and existing topics).
	ReplicationFactor int

	// MessageRetention is chat.messages' retention.ms. Default 7 days.
	// Negative keeps messages forever (the embedded default without
	// ClickHouse, where the log is the history).
	MessageRetention time.Duration

	// DeadLetterRetention is chat.deadletter's retention.ms. Default 14 days.
	DeadLetterRetention time.Duration

	// LogIsHistory says chat.messages holds the only copy of the history
	// (a deployment without ClickHouse): an existing chat.messages that
	// deletes records after a time is then refused, not warned of, as
	// the messages it deletes would be gone.
	LogIsHistory bool
}

func (c *Config) setDefaults() {
	if c.Partitions == 0 {
		c.Partitions = 16
	}
	if c.MessageRetention == 0 {
		c.MessageRetention = 7 * 24 * time.Hour
	}
	if c.DeadLetterRetention == 0 {
		c.DeadLetterRetention = 14 * 24 * time.Hour
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	c.setDefaults()
	if len(c.Brokers) == 0 {
		return errors.New("topics: no brokers configured; set CHAT_KAFKA_BROKERS (host:port,...)")
	}
	if c.Partitions < 1 || c.Partitions > 10000 {
		return fmt.Errorf("topics: partitions %d out of range 1..10000", c.Partitions)
	}
	if err := CheckReplicationFactor(c.ReplicationFactor); err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	if c.DeadLetterRetention < 0 {
		return fmt.Errorf("topics: dead-letter retention %v is negative", c.DeadLetterRetention)
	}
	return nil
}

// MaxReplicationFactor is the most replicas a topic may be asked for.
// Kafka deployments keep 3, rarely 5; more is taken for a typo.
const MaxReplicationFactor = 7

// CheckReplicationFactor refuses a replication factor that cannot be
// meant, naming the setting it comes from.
func CheckReplicationFactor(n int) error {
	if n < 0 || n > MaxReplicationFactor {
		return fmt.Errorf("replication-factor %d is out of range 0..%d (CHAT_REPLICATION_FACTOR / -replication-factor): "+
			"set the number of brokers that keep each record, e.g. CHAT_REPLICATION_FACTOR=3 on a cluster of three brokers or more, "+
			"or 0 for the broker's default (a single broker)", n, MaxReplicationFactor)
	}
	return nil
}

// Spec is what one topic must look like.
type Spec struct {
	Name       string
	Partitions int
	// ReplicationFactor is the replicas asked for; 0: the broker's
	// default, which is not checked.
	ReplicationFactor int
	Configs           map[string]string // topic configs set at creation
	// OnlyCopy: the topic is the only copy of its records, so a retention
	// in time is a loss (Config.LogIsHistory).
	OnlyCopy bool
}

// CleanupPolicy returns the spec's cleanup.policy.
func (s Spec) CleanupPolicy() string { return s.Configs["cleanup.policy"] }

// Specs returns the specs of every chat.* topic under cfg.
func Specs(cfg Config) []Spec {
	cfg.setDefaults()
	spec := func(name string, configs map[string]string) Spec {
		if cfg.ReplicationFactor >= 2 {
			configs[minInsync] = strconv.Itoa(MinInsyncReplicas(cfg.ReplicationFactor))
		}
		return Spec{Name: name, Partitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor, Configs: configs}
	}
	messages := spec(Messages, map[string]string{
		"cleanup.policy": "delete",
		"retention.ms":   retentionMs(cfg.MessageRetention),
	})
	messages.OnlyCopy = cfg.LogIsHistory
	return []Spec{
		messages,
		spec(Acks, map[string]string{"cleanup.policy": "compact"}),
		spec(Receipts, map[string]string{"cleanup.policy": "compact"}),
		spec(Members, map[string]string{"cleanup.policy": "compact"}),
		spec(DeadLetter, map[string]string{
			"cleanup.policy": "delete",
			"retention.ms":   retentionMs(cfg.DeadLetterRetention),
		}),
	}
}

const minInsync = "min.insync.replicas"

// MinInsyncReplicas is the min.insync.replicas of topics with n replicas:
// n-1, so that a record the producer's acks=all got back is on n-1
// brokers at least, and one broker may be down without writes being
// refused. For n = 2 it is 1: a record acknowledged while the other
// broker was out of sync is on one disk only.
func MinInsyncReplicas(n int) int { return max(1, n-1) }

func retentionMs(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// msDuration reads a retention.ms as a duration, for messages; one that
// does not parse is returned as it is.
func msDuration(ms string) string {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return ms
	}
	return (time.Duration(n) * time.Millisecond).String()
}
