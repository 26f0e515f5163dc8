// Package schema defines the events that travel on the chat.* topics, their
// versioned binary encoding, the Kafka record keys, and the ClickHouse DDL
// (clickhouse/*.sql) that the stores apply.
//
// # Encoding
//
// Every record value starts with two bytes: the encoding version (currently
// 1) and the event kind. The fields follow in a fixed order per kind:
// strings as a uvarint length and the bytes, integers as zig-zag varints.
// A field added later goes at the end and is optional: a record written
// before it ends where the field would start (a leave's join position is
// such a field). A reader older than the field refuses the record as
// malformed, so readers are upgraded before writers.
// Decoders reject unknown versions with ErrUnknownVersion, a kind that does
// not match the decoder with ErrWrongKind, and anything else that does not
// parse or breaks a limit (IDs, body size, a cursor or a member's position
// above MaxCursor) with ErrMalformed. A decoder never panics on any input;
// the fuzz tests hold it to that.
//
// # Keys
//
// chat.messages is keyed by gid; chat.acks, chat.receipts and chat.members by
// "gid/uid". The partition of a record is chosen from the gid alone (see
// package topics), so every record of a group lands in the same partition
// number of every topic.
//
// The functions here are pure and safe for concurrent use.
package schema
