// Package broker runs the embedded Kafka broker (kfake) that the embedded
// default and the tests use: one node, speaking the Kafka protocol on a TCP
// listener, so kafka-go, kcat and any other Kafka client can attach.
//
// With a data directory the log survives restarts. A Broker is safe for
// concurrent use; Close stops it and waits for its listeners.
package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"

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

	// TLS, when set, makes the listener speak TLS only, as a managed
	// Kafka's SSL listener does.
	TLS *tls.Config

	// Users, when any, turns SASL on: a client must log in as one of them
	// before any other request, as on a SASL_PLAINTEXT or SASL_SSL
	// listener.
	Users []User

	// Log receives the broker's warnings and errors: a damaged segment cut
	// back when the data dir is loaded (its records are gone, and their
	// offsets go to the next ones), a write to the data dir that failed.
	// Nil discards them.
	Log *slog.Logger
}

// User is a SASL login the broker takes.
type User struct {
	Mechanism      string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Name, Password string
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
	lock    *os.File // DataDir/.lock, held while the broker runs
}

// Start starts a broker. It fails when the listen address is taken.
func Start(cfg Config) (*Broker, error) {
	cfg.setDefaults()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("broker: listen on %s: %w; is another broker running there? set CHAT_KAFKA_LISTEN to a free address", cfg.Listen, err)
		}
		return nil, fmt.Errorf("broker: listen on %s: %w; set CHAT_KAFKA_LISTEN to a host:port of this machine, e.g. 127.0.0.1:9092", cfg.Listen, err)
	}
	var lock *os.File
	if cfg.DataDir != "" {
		if lock, err = lockDir(cfg.DataDir); err != nil {
			ln.Close()
			return nil, err
		}
	}
	used := false
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		// kfake applies time retention to every topic, compacted ones too,
		// and its default is 7 days: a member's join, or a cursor, older
		// than that would vanish although it is its key's newest record.
		// Topics that want time retention (chat.messages, chat.deadletter)
		// set retention.ms themselves.
		kfake.BrokerConfigs(map[string]string{"log.retention.ms": "-1"}),
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			if used {
				return nil, errors.New("broker: one listener only")
			}
			used = true
			return ln, nil
		}),
	}
	if cfg.Log != nil {
		opts = append(opts, kfake.WithLogger(kfakeLog{cfg.Log}))
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	if cfg.TLS != nil {
		opts = append(opts, kfake.TLS(cfg.TLS))
	}
	if len(cfg.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range cfg.Users {
			opts = append(opts, kfake.Superuser(u.Mechanism, u.Name, u.Password))
		}
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		ln.Close()
		if lock != nil {
			lock.Close()
			return nil, fmt.Errorf("broker: start from data dir %s: %w; if a file there is damaged, restore the directory from a backup, "+
				"or move it away to start with an empty log (which loses every message and cursor in it)", cfg.DataDir, err)
		}
		return nil, fmt.Errorf("broker: start: %w", err)
	}
	return &Broker{cluster: c, addr: c.ListenAddrs()[0], lock: lock}, nil
}

// lockDir takes DataDir/.lock for this process: two brokers writing one log
// would hand out the same offsets and interleave their files.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: data dir: %w", err)
	}
	name := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("broker: data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("broker: data dir %s is in use by another broker (%s is locked: %w); stop it, or give each broker a data directory of its own", dir, name, err)
	}
	return f, nil
}

// Addr is the host:port Kafka clients connect to.
func (b *Broker) Addr() string { return b.addr }

// Cluster gives tests and tools the kfake cluster (compaction, retention).
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// Close stops the broker; with a data directory the log is flushed to disk
// and the directory is free for another broker.
func (b *Broker) Close() {
	b.cluster.Close()
	if b.lock != nil {
		b.lock.Close()
	}
}

// kfakeLog passes kfake's warnings and errors to a slog.Logger; its info
// and debug lines (every request) are dropped.
type kfakeLog struct{ l *slog.Logger }

func (k kfakeLog) Logf(level kfake.LogLevel, format string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		k.l.Error("kafka broker: " + fmt.Sprintf(format, args...))
	case kfake.LogLevelWarn:
		k.l.Warn("kafka broker: " + fmt.Sprintf(format, args...))
	}
}
