// Package metrics defines every Prometheus series a chatd process exposes,
// in one place, so that their names, labels and help texts do not drift
// between the parts that feed them.
//
// New registers the series on a registerer that the caller owns (one per
// process; never the global one). Every method of *Set is safe for
// concurrent use and does nothing on a nil *Set, so code that runs without
// metrics (tests, tools) passes nil.
//
// The series:
//
//	chat_sends_total                         messages accepted from clients (gateway)
//	chat_sends_overloaded_total              sends refused at once as overloaded (gateway)
//	chat_pushes_total                        messages written to client connections (gateway)
//	chat_e2e_latency_seconds                 histogram: a message's sent_at to its push written to a recipient
//	chat_connections                         open, authenticated client connections (gateway)
//	chat_connections_refused_total{reason}   WebSockets refused: authenticating (the gateway held its most still authenticating), user_conns (the user's most), presence (the user's presence could not be written) (gateway)
//	chat_resyncs_total{reason}               resync frames sent: pushes to a connection may have been lost (gateway)
//	chat_consumer_lag{group,partition}       records left to read, per assigned partition
//	chat_consumer_records_total{group}       records handed to a consumer's handler
//	chat_batch_size{group}                   histogram: records per handled batch
//	chat_consumer_retries_total{group}       failed batches (retried, nothing skipped)
//	chat_deadletter_total{topic}             poison records copied to chat.deadletter, by source topic
//	chat_consumer_deleted_total{group}       records the topic's retention deleted before the group handled them
//	chat_store_seconds{store,op}             histogram: latency of store calls (redis: by command; clickhouse: by call)
package metrics

import (
	"bytes"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Set holds the series of one process.
type Set struct {
	sends       prometheus.Counter
	overloaded  prometheus.Counter
	pushes      prometheus.Counter
	e2e         prometheus.Histogram
	connections prometheus.Gauge
	refused     *prometheus.CounterVec
	resyncs     *prometheus.CounterVec
	lag         *prometheus.GaugeVec
	records     *prometheus.CounterVec
	batch       *prometheus.HistogramVec
	retries     *prometheus.CounterVec
	deadletter  *prometheus.CounterVec
	deleted     *prometheus.CounterVec
	store       *prometheus.HistogramVec
}

// New defines the series and registers them on reg. It fails when reg
// already holds series of the same names.
func New(reg prometheus.Registerer) (*Set, error) {
	s := &Set{
		sends: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chat_sends_total", Help: "Messages accepted from clients and appended to chat.messages.",
		}),
		overloaded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chat_sends_overloaded_total", Help: "Sends a gateway refused at once as overloaded (more in hand than it could take in time); clients resend them.",
		}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chat_pushes_total", Help: "Messages written to client connections (one per message per recipient connection).",
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chat_e2e_latency_seconds",
			Help:    "From a message's sent_at (taken when the gateway accepted it) to its push written to a recipient's connection.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30},
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chat_connections", Help: "Open, authenticated client connections.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chat_connections_refused_total", Help: "WebSocket connections a gateway refused, by reason: authenticating (it held its most connections still authenticating; answered 503), user_conns (the user had their most connections to it; closed with 4029), presence (the user's presence could not be written; closed with 1013), starting (it did not get its pushes yet; answered 503).",
		}, []string{"reason"}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chat_resyncs_total", Help: "Resync frames a gateway sent, by reason: pushes to the connection may have been lost, and it syncs and pulls.",
		}, []string{"reason"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "chat_consumer_lag", Help: "Records left to read in a partition assigned to this process, after its last batch.",
		}, []string{"group", "partition"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chat_consumer_records_total", Help: "Records handed to a consumer's handler and made durable.",
		}, []string{"group"}),
		batch: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chat_batch_size",
			Help:    "Records per batch a consumer handled.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9), // 1 .. 65536
		}, []string{"group"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chat_consumer_retries_total", Help: "Batches whose handling failed and was retried; nothing is skipped.",
		}, []string{"group"}),
		deadletter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chat_deadletter_total", Help: "Records no consumer could decode, copied to chat.deadletter, by source topic.",
		}, []string{"topic"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chat_consumer_deleted_total", Help: "Records the topic's retention deleted before the consumer group handled them: their effects are missing from its store.",
		}, []string{"group"}),
		store: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "chat_store_seconds",
			Help:    "Latency of store calls: redis by command (pipeline for a pipeline), clickhouse by call.",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 5},
		}, []string{"store", "op"}),
	}
	for _, c := range []prometheus.Collector{s.sends, s.overloaded, s.pushes, s.e2e, s.connections, s.refused, s.resyncs, s.lag, s.records, s.batch, s.retries, s.deadletter, s.deleted, s.store} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Resynced counts n resync frames sent for reason.
func (s *Set) Resynced(reason string, n int) {
	if s != nil {
		s.resyncs.WithLabelValues(reason).Add(float64(n))
	}
}

// Overloaded counts a send refused as overloaded.
func (s *Set) Overloaded() {
	if s != nil {
		s.overloaded.Inc()
	}
}

// Sent counts n accepted sends.
func (s *Set) Sent(n int) {
	if s != nil {
		s.sends.Add(float64(n))
	}
}

// Pushed counts n messages written to a connection.
func (s *Set) Pushed(n int) {
	if s != nil && n > 0 {
		s.pushes.Add(float64(n))
	}
}

// ObserveE2E records the latency of one delivery of a message sent at
// sentAtMs (unix ms), as of now.
func (s *Set) ObserveE2E(sentAtMs int64, now time.Time) {
	if s != nil && sentAtMs > 0 {
		s.e2e.Observe(max(0, float64(now.UnixMilli()-sentAtMs)/1000))
	}
}

// ConnOpened and ConnClosed track open connections.
func (s *Set) ConnOpened() {
	if s != nil {
		s.connections.Inc()
	}
}

// ConnClosed: see ConnOpened.
func (s *Set) ConnClosed() {
	if s != nil {
		s.connections.Dec()
	}
}

// Refused counts a WebSocket connection refused for reason.
func (s *Set) Refused(reason string) {
	if s != nil {
		s.refused.WithLabelValues(reason).Inc()
	}
}

// Consumed records one handled batch of n records of a consumer group.
func (s *Set) Consumed(group string, n int) {
	if s != nil {
		s.records.WithLabelValues(group).Add(float64(n))
		s.batch.WithLabelValues(group).Observe(float64(n))
	}
}

// Lag sets the lag of a partition a consumer group reads here.
func (s *Set) Lag(group string, partition int, lag int64) {
	if s != nil {
		s.lag.WithLabelValues(group, strconv.Itoa(partition)).Set(float64(max(lag, 0)))
	}
}

// ForgetLag drops the lag series of a consumer group's partitions, when a
// rebalance takes them away from this process.
func (s *Set) ForgetLag(group string) {
	if s != nil {
		s.lag.DeletePartialMatch(prometheus.Labels{"group": group})
	}
}

// Retried counts one failed batch of a consumer group.
func (s *Set) Retried(group string) {
	if s != nil {
		s.retries.WithLabelValues(group).Inc()
	}
}

// DeadLettered counts one poison record of topic.
func (s *Set) DeadLettered(topic string) {
	if s != nil {
		s.deadletter.WithLabelValues(topic).Inc()
	}
}

// Deleted counts n records of a consumer group deleted before it handled
// them.
func (s *Set) Deleted(group string, n int64) {
	if s != nil {
		s.deleted.WithLabelValues(group).Add(float64(n))
	}
}

// Consumer makes the counters of consumer group, reading topic, exist at
// 0 from its start: an alert on their increase sees the first record,
// retry or dead letter, which a series that first appears at 1 hides.
func (s *Set) Consumer(group, topic string) {
	if s != nil {
		s.records.WithLabelValues(group)
		s.retries.WithLabelValues(group)
		s.deadletter.WithLabelValues(topic)
		s.deleted.WithLabelValues(group)
	}
}

// Gateway makes a gateway's refusals and resyncs exist at 0 for each of
// their reasons from its start, for the same reason as Consumer.
func (s *Set) Gateway(refusals, resyncs []string) {
	if s != nil {
		for _, r := range refusals {
			s.refused.WithLabelValues(r)
		}
		for _, r := range resyncs {
			s.resyncs.WithLabelValues(r)
		}
	}
}

// ObserveStore records the latency of one store call.
func (s *Set) ObserveStore(store, op string, d time.Duration) {
	if s != nil {
		s.store.WithLabelValues(store, op).Observe(d.Seconds())
	}
}

// TimeStore starts timing a store call; call the result when it is done:
//
//	defer m.TimeStore("clickhouse", "insert_messages")()
func (s *Set) TimeStore(store, op string) func() {
	if s == nil {
		return func() {}
	}
	start := time.Now()
	return func() { s.ObserveStore(store, op, time.Since(start)) }
}

// Delivered counts the n messages of one push frame written to a
// connection and observes their end-to-end latency, as of now. frame is
// the push frame as written ({"op":"push","msgs":[...]}): each message in
// it carries "sent_at" (unix ms) once, and a body's own quotes are escaped,
// so the first n occurrences are the messages' own.
func (s *Set) Delivered(frame []byte, n int, now time.Time) {
	if s == nil || n <= 0 {
		return
	}
	s.pushes.Add(float64(n))
	for ; n > 0; n-- {
		i := bytes.Index(frame, sentAtField)
		if i < 0 {
			return
		}
		frame = frame[i+len(sentAtField):]
		s.ObserveE2E(leadingInt(frame), now)
	}
}

var sentAtField = []byte(`"sent_at":`)

// leadingInt reads the decimal number b starts with; 0 when none.
func leadingInt(b []byte) int64 {
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int64(c-'0')
	}
	return v
}
