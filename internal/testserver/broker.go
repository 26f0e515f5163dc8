package testserver

import (
	"testing"

	"github.com/segmentio/kafka-go"

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

// KafkaTransport is a kafka-go transport whose connections are let go when
// the test ends. A client or writer without one uses kafka-go's shared
// transport, whose pool per address outlives the test: it keeps asking a
// broker that is gone for metadata, and serves what it cached to a later
// test whose broker got the same port.
func KafkaTransport(tb testing.TB) *kafka.Transport {
	tr := &kafka.Transport{}
	tb.Cleanup(tr.CloseIdleConnections)
	return tr
}
