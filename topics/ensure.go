package topics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/tlsclient"
)

// ErrMismatch is returned by Ensure and Verify when an existing topic does
// not match its spec in a way that must not be changed silently.
var ErrMismatch = errors.New("topics: existing topic does not match the spec")

// State is what the broker reports about one topic.
type State struct {
	Name       string
	Exists     bool
	Partitions int
	// ReplicationFactor is the fewest replicas of any of its partitions.
	ReplicationFactor int
	Configs           map[string]string // as described by the broker
}

// Problem is one difference between a topic and its spec.
type Problem struct {
	Topic  string
	Fatal  bool // partition count or cleanup policy: cannot be fixed in place
	Detail string
	// OnlyCopy: chat.messages deletes records, and is the only copy of
	// the history (Config.LogIsHistory).
	OnlyCopy bool
}

// ErrOnlyCopy is among the problems of an ErrMismatch when chat.messages
// deletes records where it is the only copy of the history: a role (or
// chatd dev on a data dir made with ClickHouse) without ClickHouse.
var ErrOnlyCopy = errors.New("topics: chat.messages deletes the only copy of the history")

// mismatchError is ErrMismatch with its problems, and ErrOnlyCopy when
// one of them is that.
type mismatchError struct {
	msg      string
	onlyCopy bool
}

func (e *mismatchError) Error() string { return e.msg }

func (e *mismatchError) Is(target error) bool {
	return target == ErrMismatch || e.onlyCopy && target == ErrOnlyCopy
}

func (p Problem) String() string { return p.Topic + ": " + p.Detail }

// Ensure creates the topics that are missing and verifies the ones that
// exist. A replication factor above the cluster's brokers returns
// ErrTooFewBrokers, whether the topics exist or not. A partition-count or
// cleanup-policy mismatch returns ErrMismatch with what to do; other drift
// (retention, replication) is logged as a warning.
func Ensure(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.setDefaults()
	client, closeClient := NewClient(cfg.Brokers, cfg.Security, 10*time.Second)
	defer closeClient()
	specs := Specs(cfg)

	states, brokers, err := describe(ctx, client, specs)
	if err != nil {
		return err
	}
	if err := checkBrokers(cfg.ReplicationFactor, brokers); err != nil {
		return err
	}
	// The topics that exist are checked before any is made: one made
	// beside a mismatched topic would carry the wrong partition count for
	// good, and the count the error asks for would then mismatch it.
	var exist []Spec
	var existStates []State
	for i, s := range specs {
		if states[i].Exists {
			exist, existStates = append(exist, s), append(existStates, states[i])
		}
	}
	if err := mismatch(Verify(exist, existStates)); err != nil {
		return err
	}
	var create []kafka.TopicConfig
	for i, s := range specs {
		if states[i].Exists {
			continue
		}
		rf := s.ReplicationFactor
		if rf == 0 {
			rf = -1 // the broker's default.replication.factor
		}
		tc := kafka.TopicConfig{Topic: s.Name, NumPartitions: s.Partitions, ReplicationFactor: rf}
		for k, v := range s.Configs {
			tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
		}
		create = append(create, tc)
	}
	if len(create) > 0 {
		resp, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: create})
		if err != nil {
			return fmt.Errorf("topics: create: %w", err)
		}
		for name, err := range resp.Errors {
			if errors.Is(err, kafka.InvalidReplicationFactor) {
				return fmt.Errorf("topics: create %s with replication factor %d: %w; the cluster has %d broker(s): "+
					"set CHAT_REPLICATION_FACTOR (-replication-factor) to at most that, or add brokers", name, cfg.ReplicationFactor, err, brokers)
			}
			if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
				return fmt.Errorf("topics: create %s: %w", name, err)
			}
			if err == nil && log != nil {
				log.Info("created topic", "topic", name, "partitions", cfg.Partitions, "replication_factor", replicationOf(cfg))
			}
		}
		if states, brokers, err = describe(ctx, client, specs); err != nil {
			return err
		}
	}
	problems := Verify(specs, states)
	for _, p := range problems {
		if !p.Fatal && log != nil {
			log.Warn("topic differs from its spec", "topic", p.Topic, "detail", p.Detail)
		}
	}
	if log != nil {
		warnUnreplicated(cfg, states, brokers, log)
	}
	return mismatch(problems)
}

// Check compares the topics with the specs of cfg (Verify), after
// refusing, as Ensure does, a replication factor above the cluster's
// brokers (ErrTooFewBrokers): no reassignment can add those replicas. It
// changes nothing.
func Check(ctx context.Context, cfg Config) ([]Problem, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	client, closeClient := NewClient(cfg.Brokers, cfg.Security, 15*time.Second)
	defer closeClient()
	specs := Specs(cfg)
	states, brokers, err := describe(ctx, client, specs)
	if err != nil {
		return nil, err
	}
	if err := checkBrokers(cfg.ReplicationFactor, brokers); err != nil {
		return nil, err
	}
	return Verify(specs, states), nil
}

// mismatch returns ErrMismatch with the fatal problems, if any.
func mismatch(problems []Problem) error {
	var fatal []string
	onlyCopy := false
	for _, p := range problems {
		if p.Fatal {
			fatal = append(fatal, p.String())
			onlyCopy = onlyCopy || p.OnlyCopy
		}
	}
	if len(fatal) > 0 {
		return &mismatchError{msg: fmt.Sprintf("%v:\n  %s", ErrMismatch, strings.Join(fatal, "\n  ")), onlyCopy: onlyCopy}
	}
	return nil
}

// Verify compares topics with their specs. states[i] belongs to specs[i].
func Verify(specs []Spec, states []State) []Problem {
	var out []Problem
	for i, s := range specs {
		st := states[i]
		if !st.Exists {
			out = append(out, Problem{Topic: s.Name, Fatal: true, Detail: "does not exist; run chatd once or `chatctl topics create`"})
			continue
		}
		if st.Partitions != s.Partitions {
			out = append(out, Problem{Topic: s.Name, Fatal: true, Detail: fmt.Sprintf(
				"has %d partitions, the configuration says %d; partition counts never change on a live system "+
					"(per-group order would break): set CHAT_PARTITIONS=%d to match, or recreate the topics on an empty system",
				st.Partitions, s.Partitions, st.Partitions)})
		}
		if st.ReplicationFactor < s.ReplicationFactor {
			out = append(out, Problem{Topic: s.Name, Detail: fewerReplicas(s, st)})
		}
		keys := make([]string, 0, len(s.Configs))
		for k := range s.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			want, got := s.Configs[k], st.Configs[k]
			if got == want {
				continue
			}
			if k == minInsync {
				// Too few replicas say it already; a higher one is stricter
				// than asked, which is the operator's to choose.
				n, err := strconv.Atoi(got)
				if st.ReplicationFactor >= s.ReplicationFactor && (err != nil || n < MinInsyncReplicas(s.ReplicationFactor)) {
					out = append(out, Problem{Topic: s.Name, Detail: lowMinInsync(s, st)})
				}
				continue
			}
			lost := s.OnlyCopy && k == "retention.ms" && deletes(got)
			fatal := k == "cleanup.policy" || lost
			detail := fmt.Sprintf("%s is %q, the spec says %q", k, got, want)
			switch {
			case lost:
				detail = fmt.Sprintf("deletes messages after %s (retention.ms %s), but this role has no ClickHouse, so the topic would be the only copy of the history: "+
					"set CHAT_CLICKHOUSE_ADDRS (and CHAT_CLICKHOUSE_DATABASE) as the deployment's other roles have them; "+
					"if the deployment keeps no ClickHouse, make the topic keep everything first: kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config retention.ms=-1",
					msDuration(got), got, s.Name)
			case k == "cleanup.policy":
				detail += "; a wrong cleanup policy loses data (delete) or history (compact): fix it with kafka-configs or recreate the topic"
			case s.Name == Messages && k == "retention.ms":
				// The spec's retention is a setting: the topic may be right.
				detail += "; the spec's comes from CHAT_MESSAGE_RETENTION (-message-retention): set it to what this deployment keeps " +
					"(negative, e.g. -1h, for everything, as chatd without ClickHouse keeps it), or change the topic with kafka-configs"
			}
			out = append(out, Problem{Topic: s.Name, Fatal: fatal, Detail: detail, OnlyCopy: lost})
		}
	}
	return out
}

// Describe reads the partition counts, replication factors and configs of
// the spec'd topics, min.insync.replicas among them.
func Describe(ctx context.Context, client *kafka.Client, specs []Spec) ([]State, error) {
	states, _, err := describe(ctx, client, specs)
	return states, err
}

// describe is Describe, and the number of brokers in the cluster: those
// the metadata lists (the ones up), or more when a partition of the
// spec'd topics has more replicas (its brokers exist, if down).
func describe(ctx context.Context, client *kafka.Client, specs []Spec) ([]State, int, error) {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, 0, fmt.Errorf("topics: metadata from %s: %w%s", client.Addr, err, upHint(err))
	}
	brokers := len(md.Brokers)
	states := make([]State, len(specs))
	var res []kafka.DescribeConfigRequestResource
	for i, s := range specs {
		states[i].Name = s.Name
		for _, t := range md.Topics {
			if t.Name == s.Name && t.Error == nil {
				states[i].Exists = true
				states[i].Partitions = len(t.Partitions)
				for j, p := range t.Partitions {
					if j == 0 || len(p.Replicas) < states[i].ReplicationFactor {
						states[i].ReplicationFactor = len(p.Replicas)
					}
					brokers = max(brokers, len(p.Replicas))
				}
			}
		}
		if states[i].Exists {
			keys := []string{minInsync}
			for k := range s.Configs {
				if k != minInsync {
					keys = append(keys, k)
				}
			}
			res = append(res, kafka.DescribeConfigRequestResource{
				ResourceType: kafka.ResourceTypeTopic, ResourceName: s.Name, ConfigNames: keys})
		}
	}
	if len(res) == 0 {
		return states, brokers, nil
	}
	dc, err := client.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: res})
	if err != nil {
		return nil, 0, fmt.Errorf("topics: describe configs: %w", err)
	}
	for _, r := range dc.Resources {
		if r.Error != nil {
			return nil, 0, fmt.Errorf("topics: describe configs of %s: %w", r.ResourceName, r.Error)
		}
		for i := range states {
			if states[i].Name != r.ResourceName {
				continue
			}
			states[i].Configs = map[string]string{}
			for _, e := range r.ConfigEntries {
				states[i].Configs[e.ConfigName] = e.ConfigValue
			}
		}
	}
	return states, brokers, nil
}

// upHint asks whether the broker is up after a request that failed,
// unless the broker answered (a refused login) or the TLS handshake
// failed on its certificate: it was up then.
func upHint(err error) string {
	if a := tlsclient.Advice(err, "CHAT_KAFKA_TLS", "CHAT_KAFKA_CA_FILE", "the brokers'"); a != "" {
		return a
	}
	var answer kafka.Error
	if errors.As(err, &answer) {
		return ""
	}
	return "; is the broker up?"
}

// deletes reports whether a retention.ms deletes records in a time that
// matters: -1, or a span of a century or more (Long.MAX_VALUE, as some
// tools write "for ever"), keeps them.
func deletes(retentionMs string) bool {
	n, err := strconv.ParseInt(retentionMs, 10, 64)
	return err != nil || (n >= 0 && n < (100*365*24*time.Hour).Milliseconds())
}
