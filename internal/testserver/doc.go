// Package testserver starts real servers (clickhouse-server, redis-server)
// from PATH for tests: each on free loopback ports, with a generated minimal
// config and all its state in one directory, in its own process group.
//
// Tests use real peers, never mocks. A missing binary fails the test with an
// install hint; it never skips.
//
// On Linux a started server is also bound to the test binary with a parent
// death signal (SIGKILL), so a test binary that dies or exits without
// cleanup does not leave servers behind.
//
// The server handles (*ClickHouse, …) are safe for concurrent use; Stop,
// Kill and Start serialize against each other.
package testserver
