// Package producers writes the chat.* events to Kafka with settings made for
// this workload: every send waits for all in-sync replicas, records are
// routed by the gid in their key (topics.Partition, Kafka's murmur2), and
// each partition has one produce request in flight at a time. A send to a
// partition with no request in flight leaves at once (no linger); sends
// that arrive while one is in flight go together in the next request, so a
// busy partition batches as much as a round trip gathers and a quiet one
// adds nothing to a send's latency.
//
// A send returns once the broker has the record; SendMessage returns its
// msgid (the record's offset). Errors go back to the caller, who decides
// whether to retry. A Producer is safe for concurrent use.
package producers
