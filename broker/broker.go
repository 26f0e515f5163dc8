// Package broker runs the embedded Kafka broker (kfake) that the embedded
// default and the tests use: one node, speaking the Kafka protocol on a TCP
// listener, so kafka-go, kcat and any other Kafka client can attach.
//
// With a data directory the log survives restarts. A Broker is safe for
// concurrent use; Close stops it and waits for its listeners.
package broker

import (
	"errors"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Config of the embedded broker.
type Config struct {
	// Listen is the Kafka listener's address. Default "127.0.0.1:0" (a free
	// port). Clients connect to the address the listener reports.
	Listen string

	// DataDir keeps the log on disk; empty keeps it in memory only.
	DataDir string

	// SyncWrites fsyncs every produced batch before it is acknowledged.
	// Slower, but a crash of the process loses nothing acknowledged.
	SyncWrites bool
}

func (c *Config) setDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
}

// Broker is a running embedded broker.
type Broker struct {
	cluster *kfake.Cluster
	addr    string
}

// Start starts a broker. It fails when the listen address is taken.
func Start(cfg Config) (*Broker, error) {
	cfg.setDefaults()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("broker: listen on %s: %w; is another broker running there? set CHAT_KAFKA_LISTEN to a free address", cfg.Listen, err)
	}
	used := false
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			if used {
				return nil, errors.New("broker: one listener only")
			}
			used = true
			return ln, nil
		}),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker: start: %w", err)
	}
	return &Broker{cluster: c, addr: c.ListenAddrs()[0]}, nil
}

// Addr is the host:port Kafka clients connect to.
func (b *Broker) Addr() string { return b.addr }

// Cluster gives tests and tools the kfake cluster (compaction, retention).
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// Close stops the broker; with a data directory the log is flushed to disk.
func (b *Broker) Close() { b.cluster.Close() }
