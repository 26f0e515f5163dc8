// Package gateway is where clients reach the system: WebSocket connections
// speaking package protocol, the same operations as JSON over HTTP, and the
// administration of groups and members.
//
// A Gateway authenticates every connection with a JWT (HS256), checks
// membership on every operation, writes sends, acks and reads to Kafka, serves
// pulls and syncs from the stores, registers its users' presence in Redis and
// delivers the pushes the fan-out consumer publishes on this node's channel.
//
// # Concurrency
//
// Each connection has one goroutine, which waits for the client's next frame
// in a call shallow enough for the smallest stack, answers pings and takes
// pongs itself, and reads and handles every other frame on a goroutine of
// its own, one at a time, in order. Its bounded outbound queue is drained by
// a writer goroutine that runs only while the queue holds something; one
// loop of the node's pings every connection. An idle connection so costs
// one goroutine of 2 KiB and no timer. Pushes and answers are enqueued
// without blocking: a connection whose queue is full is closed with a
// reason (it resyncs by pull on reconnect), so a slow client never stalls
// anyone else. A connection is served once its user's presence is written,
// which the fan-out's pushes follow; one whose presence Redis would not take
// is closed with 1013 (try again later) rather than served unseen.
// All exported methods are safe for concurrent use.
package gateway
