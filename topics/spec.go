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

	// Partitions of every chat.* topic. Default 16. It bounds the consumers'
	// parallelism and cannot change later without breaking per-group order:
	// choose it for the largest deployment.
	Partitions int

	// ReplicationFactor of new topics. Default -1: the broker's default.
	ReplicationFactor int

	// MessageRetention is chat.messages' retention.ms. Default 7 days.
	// Negative keeps messages forever (the embedded default without
	// ClickHouse, where the log is the history).
	MessageRetention time.Duration

	// DeadLetterRetention is chat.deadletter's retention.ms. Default 14 days.
	DeadLetterRetention time.Duration
}

func (c *Config) setDefaults() {
	if c.Partitions == 0 {
		c.Partitions = 16
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
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
	if c.DeadLetterRetention < 0 {
		return fmt.Errorf("topics: dead-letter retention %v is negative", c.DeadLetterRetention)
	}
	return nil
}

// Spec is what one topic must look like.
type Spec struct {
	Name       string
	Partitions int
	Configs    map[string]string // topic configs set at creation
}

// CleanupPolicy returns the spec's cleanup.policy.
func (s Spec) CleanupPolicy() string { return s.Configs["cleanup.policy"] }

// Specs returns the specs of every chat.* topic under cfg.
func Specs(cfg Config) []Spec {
	cfg.setDefaults()
	compacted := func(name string) Spec {
		return Spec{Name: name, Partitions: cfg.Partitions, Configs: map[string]string{
			"cleanup.policy": "compact",
		}}
	}
	return []Spec{
		{Name: Messages, Partitions: cfg.Partitions, Configs: map[string]string{
			"cleanup.policy": "delete",
			"retention.ms":   retentionMs(cfg.MessageRetention),
		}},
		compacted(Acks),
		compacted(Receipts),
		compacted(Members),
		{Name: DeadLetter, Partitions: cfg.Partitions, Configs: map[string]string{
			"cleanup.policy": "delete",
			"retention.ms":   retentionMs(cfg.DeadLetterRetention),
		}},
	}
}

func retentionMs(d time.Duration) string {
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}
