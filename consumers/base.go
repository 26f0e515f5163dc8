package consumers

import (
	"log/slog"
	"time"

	"github.com/groupchat/chatd/metrics"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/topics"
)

// The consumer group of each consumer. Operators reset these to replay.
const (
	GroupPersister       = "chat.persister"
	GroupAckProjector    = "chat.ack-projector"
	GroupMemberProjector = "chat.member-projector"
)

// Base holds what every consumer's runner shares.
type Base struct {
	Brokers    []string            // required
	Security   topics.Security     // how to reach them; default plaintext
	DeadLetter *producers.Producer // required
	Logger     *slog.Logger        // default slog.Default()
	Metrics    *metrics.Set        // optional: lag, batch sizes, retries, dead letters

	// Tune overrides runner settings (batch size, back-off, timeouts) in
	// tests and benchmarks; nil keeps the defaults.
	Tune func(*RunnerTuning)
}

// RunnerTuning is the part of a runner's Config that Base.Tune may change.
type RunnerTuning struct {
	BatchSize                                 int
	MinBackoff, MaxBackoff                    time.Duration
	SessionTimeout, RebalanceTimeout, MaxWait time.Duration
	CommitInterval                            time.Duration
}

func runnerConfig[E any](b Base, group, topic string, decode func([]byte) (E, error), h Handler[E], offsets OffsetStore) Config[E] {
	cfg := Config[E]{
		Brokers: b.Brokers, Security: b.Security, Group: group, Topic: topic,
		Decode: decode, Handler: h, Offsets: offsets,
		DeadLetter: b.DeadLetter, Logger: b.Logger, Metrics: b.Metrics,
		Misfiled: Misfiled[E],
	}
	if b.Tune != nil {
		t := RunnerTuning{}
		b.Tune(&t)
		cfg.BatchSize = t.BatchSize
		cfg.MinBackoff, cfg.MaxBackoff = t.MinBackoff, t.MaxBackoff
		cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.MaxWait = t.SessionTimeout, t.RebalanceTimeout, t.MaxWait
		cfg.CommitInterval = t.CommitInterval
	}
	return cfg
}
