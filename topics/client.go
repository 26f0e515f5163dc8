package topics

import (
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
