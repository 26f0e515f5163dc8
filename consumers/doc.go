// Package consumers holds the one runner under every consumer of the chat.*
// topics, and the consumers built on it: the persister (chat.messages into
// ClickHouse and the Redis window), the ack, receipt and member projectors
// (cursors and membership), the fan-out (chat.messages to the gateways of
// online members, by one Redis pub/sub channel per gateway node) and the
// receipt notifier (coalesced read-count updates to online senders).
//
// # The runner's contract
//
// A Runner joins a Kafka consumer group and, for every partition it is
// assigned, reads records in offset order, decodes them, and hands them to a
// Handler in batches: all the records that are available, up to BatchSize.
// Handle returning nil means the batch's effect is durable; only then are the
// offsets saved (in the OffsetStore next to the state, when the consumer has
// one) and committed to the group. Handle returning an error means "retry":
// the same batch is handed again after a back-off that grows to MaxBackoff,
// nothing is committed, nothing is skipped. Effects must be idempotent, since
// a crash between effect and commit replays the batch. A Handler that is
// also a Flusher (the projectors, which gather ClickHouse rows across
// partitions) may keep part of the effect in memory: the runner flushes it
// when a commit is due and saves no position past what Durable reports.
//
// A record that does not decode is poison: it is copied to chat.deadletter
// (with its origin and the error in headers) and skipped, so it never stalls
// its partition.
//
// Handle is called from one goroutine per partition; calls for different
// partitions run concurrently, calls for one partition never overlap.
package consumers
