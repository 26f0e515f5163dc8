// Package store holds the projections of the chat topics and the read side
// on top of them: Redis (the recent window of each group's messages, send
// dedup, delivery and read cursors, membership, the projections' offsets,
// and the live side: presence of users on gateway nodes and the push route,
// one pub/sub channel per node) and ClickHouse (the full history and the
// tables analysts query).
//
// Kafka is the source of truth. Every write here is an idempotent effect of
// records that a consumer replays after a crash, so a write may be repeated
// any number of times; a wiped store is rebuilt by replaying the topics
// from the offsets it kept (none: from the start).
//
// # Redis
//
// keys.go documents the key layout. All keys of a group share the hash tag
// {gid}, so each group's multi-key scripts run on one Redis Cluster slot;
// the client is a go-redis UniversalClient (one node or a cluster). Every
// call that touches many groups costs one round trip: one script or command
// per group, pipelined, with the batch folded in Go first (cursors to their
// maximum per member, members grouped by gid).
//
// The window of a group keeps its newest RedisConfig.WindowSize messages
// and a floor: the highest msgid ever trimmed. A read after the floor is
// complete from the window alone; older messages come from ClickHouse.
// Unread counts come from the window too, exact above the floor and "N+"
// below it.
//
// # Concurrency and order
//
// *Redis is safe for concurrent use. Reads may run at any time and see each
// group's state between two writes (a window read is atomic with its
// floor).
//
// ClaimSends, AppendWindow and ApplyMembers depend on order: each group must
// have one writer (the consumer that owns its partition) calling them with
// the group's records in offset order, ClaimSends before AppendWindow for
// the same batch. Cursor writes (AdvanceAcks, AdvanceReads, and the cursor
// raise of a join) keep the maximum, so they commute and may come from
// anywhere in any order.
//
// A script updates one group atomically; a batch of many groups is not
// atomic as a whole, nor is the user index written by ApplyMembers with the
// group's own hash. A crash in between leaves some groups ahead, which the
// replay of the batch makes whole.
package store
