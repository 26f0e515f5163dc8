// Package producers writes the chat.* events to Kafka with settings made for
// this workload: every send waits for all in-sync replicas, records are routed
// by gid (topics.Balancer), and batches linger for about a millisecond rather
// than kafka-go's default second, so a lone send is not held back.
//
// A send returns once the broker has the record; SendMessage returns its
// msgid (the record's offset). Errors go back to the caller, who decides
// whether to retry. A Producer is safe for concurrent use: concurrent sends to
// one partition share a batch.
package producers
