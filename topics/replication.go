package topics

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
)

// ErrTooFewBrokers is returned by Ensure and Check when the replication
// factor asked for is more than the cluster has brokers: no topic, new or
// existing, can have that many replicas.
var ErrTooFewBrokers = errors.New("topics: replication factor above the cluster's broker count")

// checkBrokers refuses a replication factor above brokers, the brokers the
// cluster has (see describe), naming the count and what to set. Without
// it, topics that exist would only be warned of, with a reassignment plan
// of more brokers than there are.
func checkBrokers(factor, brokers int) error {
	if factor <= brokers {
		return nil
	}
	return fmt.Errorf("%w: CHAT_REPLICATION_FACTOR (-replication-factor) asks for %d replicas of each partition, "+
		"but the cluster has %d broker(s): set CHAT_REPLICATION_FACTOR (-replication-factor) to at most that "+
		"(CHAT_REPLICATION_FACTOR=%d), or add brokers; a broker that is down counts only if it holds a replica of a chat.* topic, "+
		"so if brokers are down, start them first",
		ErrTooFewBrokers, factor, brokers, brokers)
}

// fewerReplicas says what a topic with fewer replicas than its spec risks,
// and how to add them.
func fewerReplicas(s Spec, st State) string {
	isr := st.Configs[minInsync]
	on := st.ReplicationFactor
	if n, err := strconv.Atoi(isr); err == nil && n < on {
		on = n
	}
	if isr == "" {
		isr = "unknown"
	}
	risk := "a broker that loses its disk loses it"
	if s.Name == Messages {
		risk += ", and a failover to a replica without the log's tail gives its msgid to another message"
	}
	return fmt.Sprintf("has replication factor %d and min.insync.replicas %s, CHAT_REPLICATION_FACTOR (-replication-factor) asks for %d: "+
		"an acknowledged record may be on %d broker(s) only: %s; "+
		"add replicas with kafka-reassign-partitions.sh --bootstrap-server \"$CHAT_KAFKA_BROKERS\" --reassignment-json-file plan.json --execute "+
		"(a plan that lists %d brokers for each of its %d partitions), then run "+
		"kafka-configs.sh --bootstrap-server \"$CHAT_KAFKA_BROKERS\" --alter --entity-type topics --entity-name %s --add-config %s=%d; "+
		"or, if %d is what this cluster keeps, set CHAT_REPLICATION_FACTOR=%d",
		st.ReplicationFactor, isr, s.ReplicationFactor, on, risk, s.ReplicationFactor, st.Partitions,
		s.Name, minInsync, MinInsyncReplicas(s.ReplicationFactor), st.ReplicationFactor, st.ReplicationFactor)
}

// lowMinInsync says what a topic whose replicas are enough but whose
// min.insync.replicas is below its spec's risks, and how to raise it.
func lowMinInsync(s Spec, st State) string {
	want := MinInsyncReplicas(s.ReplicationFactor)
	return fmt.Sprintf("has replication factor %d and min.insync.replicas %q, CHAT_REPLICATION_FACTOR=%d asks for min.insync.replicas %d: "+
		"a record is acknowledged once %s broker(s) hold it, and may be lost with one broker's disk; "+
		"run kafka-configs.sh --bootstrap-server \"$CHAT_KAFKA_BROKERS\" --alter --entity-type topics --entity-name %s --add-config %s=%d",
		st.ReplicationFactor, st.Configs[minInsync], s.ReplicationFactor, want, st.Configs[minInsync], s.Name, minInsync, want)
}

// replicationOf is cfg's replication factor, for the log.
func replicationOf(cfg Config) string {
	if cfg.ReplicationFactor == 0 {
		return "the broker's default"
	}
	return strconv.Itoa(cfg.ReplicationFactor)
}

// warnUnreplicated warns of topics of one replica on a cluster of several
// brokers while no replication factor is set: the broker's default made
// them so (1 on a stock Apache Kafka), and a record is then on the
// leader's disk alone, although the cluster could hold copies.
func warnUnreplicated(cfg Config, states []State, brokers int, log *slog.Logger) {
	if cfg.ReplicationFactor != 0 || brokers < 2 {
		return
	}
	for _, st := range states {
		if st.Exists && st.ReplicationFactor == 1 {
			log.Warn("topic has one replica on a cluster of several brokers", "topic", st.Name, "brokers", brokers,
				"detail", fmt.Sprintf("a broker that loses its disk loses the acknowledged messages of its partitions; "+
					"set CHAT_REPLICATION_FACTOR=%d on every chatd role and chatctl to be told how to add replicas "+
					"(docs/operations.md, \"Production checklist\")", min(3, brokers)))
		}
	}
}
