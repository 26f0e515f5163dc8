// Package chaos is the fault-injection harness: it runs the whole system as
// separate processes (chatbroker, redis-server, clickhouse-server, two
// gateways, the fan-out, the persister and the projectors), drives it with
// SDK clients that keep their own logs, breaks it while it works, and at the
// end checks the invariants of the design from the outside:
//
//   - every accepted message is in ClickHouse exactly once (by query);
//   - every member has every message of its groups exactly once after
//     dedup, in msgid order (from the clients' logs);
//   - no ack cursor went backwards or past a message its member had not
//     received (Redis polled every 50 ms during the run);
//   - read counts equal the truth recomputed from the clients' read logs;
//   - every poison record was dead-lettered by every consumer of its topic.
//
// The faults: kill -9 and restart of every chatd role, of the broker, Redis
// restarted with its data lost, ClickHouse stopped for 30 s, a client killed
// between its pull and its ack, connections cut in the middle of a frame,
// poison records in every topic. Each is stamped on a timeline, so a broken
// invariant is reported with the message, the member and the faults around
// it.
//
// Run starts everything, runs for Config.Duration and returns a Result;
// the caller decides what a failed verdict means (the test fails, the
// chatchaos command exits 1). Run is not safe to call twice concurrently
// on the same directory; everything else in the package is internal to one
// run, whose goroutines all end before Run returns.
package chaos
