package topics

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// NewClient is a Kafka client of brokers on connections of its own, and
// the function that lets them go. A client left on kafka-go's shared
// transport keeps a pool per broker list for as long as the process lives:
// it asks the brokers for metadata every few seconds, dials a broker that
// is gone, and answers a later broker on the same address from its cache.
//
// sec says how connections are made (TLS, SASL).
func NewClient(brokers []string, sec Security, timeout time.Duration) (*kafka.Client, func()) {
	tr := sec.Transport()
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: timeout, Transport: tr}, tr.CloseIdleConnections
}

// PartitionCount reads how many partitions topic has.
func PartitionCount(ctx context.Context, client *kafka.Client, topic string) (int, error) {
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, fmt.Errorf("topics: metadata of %s from %s: %w%s", topic, client.Addr, err, upHint(err))
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return 0, fmt.Errorf("topics: %s: %w; create the topics first (chatd creates them at start, or `chatctl topics create`)", topic, t.Error)
		}
		return len(t.Partitions), nil
	}
	return 0, fmt.Errorf("topics: %s is not on the brokers at %s; create the topics first (chatd creates them at start, or `chatctl topics create`)", topic, client.Addr)
}
