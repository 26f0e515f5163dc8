package testserver

import (
	"testing"

	"github.com/groupchat/chatd/broker"
)

// NewBroker starts an embedded Kafka broker (kfake, in memory, on a free
// loopback port) for the test and closes it when the test ends.
func NewBroker(tb testing.TB) *broker.Broker {
	tb.Helper()
	b, err := broker.Start(broker.Config{})
	if err != nil {
		tb.Fatalf("testserver: start the embedded broker: %v", err)
	}
	tb.Cleanup(b.Close)
	return b
}
