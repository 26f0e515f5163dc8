package testserver

import (
	"sync"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// HoldProduces makes b take in every produce request to topic from now on
// and answer none until release is called (once or more; the test's end
// calls it too).
func HoldProduces(tb testing.TB, b *broker.Broker, topic string) (release func()) {
	_, release = HoldProducesSeen(tb, b, topic)
	return release
}

// HoldProducesSeen is HoldProduces; arrived is closed when the first
// request it holds has come.
func HoldProducesSeen(tb testing.TB, b *broker.Broker, topic string) (arrived <-chan struct{}, release func()) {
	c := b.Cluster()
	held, came := make(chan struct{}), make(chan struct{})
	var first sync.Once
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == topic {
				first.Do(func() { close(came) })
				c.SleepControl(func() { <-held })
			}
		}
		return nil, nil, false
	})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	tb.Cleanup(release)
	return came, release
}
