// Package topics names the chat.* topics, fixes their settings, creates or
// verifies them (Ensure), and routes records to partitions by gid.
//
// All chat.* topics have one partition count and are co-partitioned by gid:
// the partition of a record comes from the gid alone (the part of the key
// before "/"), hashed with murmur2 exactly as the Java client's default
// partitioner does, so every Kafka client puts a group in the same partition.
// Partition counts are fixed at creation. Ensure never changes an existing
// topic: a mismatch is an error the operator has to resolve. Fewer replicas
// than Config.ReplicationFactor asks for, or a lower min.insync.replicas,
// is a warning naming the commands that fix it: adding replicas copies
// whole partitions between brokers, which is the operator's to schedule.
// A factor above the cluster's brokers is an error (ErrTooFewBrokers) in
// Ensure and Check alike: no reassignment can meet it.
//
// Everything here is safe for concurrent use.
package topics
