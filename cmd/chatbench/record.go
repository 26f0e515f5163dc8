package main

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/coder/websocket"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
)

// Latencies are recorded in microseconds, from 1 µs to an hour, with 3
// significant digits: an overloaded run's backlog makes latencies of
// minutes, which must not be cut to the highest value.
const (
	histMin    = 1
	histMax    = int64(time.Hour / time.Microsecond)
	histDigits = 3
	histShards = 16
)

// hist is an HDR histogram that many goroutines record into: each records
// into its own shard (by a stable number, e.g. its member index), so the
// locks are rarely contended. Readers merge the shards.
type hist struct {
	shards [histShards]struct {
		mu sync.Mutex
		h  *hdr.Histogram
	}
}

func newHist() *hist {
	h := &hist{}
	for i := range h.shards {
		h.shards[i].h = hdr.New(histMin, histMax, histDigits)
	}
	return h
}

func (h *hist) record(shard int, d time.Duration) {
	us := min(max(d.Microseconds(), histMin), histMax)
	s := &h.shards[shard%histShards]
	s.mu.Lock()
	s.h.RecordValue(us)
	s.mu.Unlock()
}

// merged returns a copy holding every shard's values.
func (h *hist) merged() *hdr.Histogram {
	out := hdr.New(histMin, histMax, histDigits)
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		out.Merge(s.h)
		s.mu.Unlock()
	}
	return out
}

// recorder holds what a load run counts. Sends due in [from, to) by the
// schedule are measured; the others (warm-up) are only loss-checked. The
// schedule decides, not the moment a send was issued, so a generator that
// falls behind does not move sends in or out of the measured span.
type recorder struct {
	from, to time.Time     // set before the first send, read-only after
	start    time.Time     // send k is due at start + k*interval
	interval time.Duration // the schedule's

	e2e    *hist // send -> OnMessage, measured messages, before the final pull
	accept *hist // send -> accepted, measured sends
	lag    *hist // how late the scheduler issued sends (the generator's own health)

	scheduled, accepted, failed atomic.Int64 // all sends
	mScheduled, mAccepted       atomic.Int64 // measured sends (due within [from, to)), whenever accepted
	acceptedIn                  atomic.Int64 // sends accepted within [from, to) by the clock, whenever due: the throughput
	delivered                   atomic.Int64 // every OnMessage call
	mDelivered                  atomic.Int64 // OnMessage calls within [from, to) by the clock
	late                        atomic.Int64 // measured messages delivered after the final pull began
	catchup                     atomic.Int64 // delivered to a member back from churn, sent while it was away: not measured
	finalPull                   atomic.Bool  // the final Open of every group has begun
	closing                     atomic.Bool  // clients are being closed: their OnError reports are not counted

	readMarks     atomic.Int64 // MarkRead calls
	receiptFrames atomic.Int64 // receipts pushes to senders
	receiptCounts atomic.Int64 // read counts they carried
	churnOut      atomic.Int64 // churn disconnects
	churnIn       atomic.Int64 // churn reconnects

	errMu   sync.Mutex
	errs    map[string]int64 // by code: protocol codes, timeout, disconnected, ...
	churned sdkStats         // of the clients churn closed
}

func newRecorder() *recorder {
	return &recorder{e2e: newHist(), accept: newHist(), lag: newHist(), errs: map[string]int64{}}
}

func (r *recorder) measured(t time.Time) bool { return !t.Before(r.from) && t.Before(r.to) }

// due is when send k was due.
func (r *recorder) due(k int) time.Time { return r.start.Add(time.Duration(k) * r.interval) }

// measuredSend reports whether send k is measured.
func (r *recorder) measuredSend(k int) bool { return r.measured(r.due(k)) }

// delivery records one OnMessage call of send k, issued at sent; its
// latency only when measure (not the catch-up of a member back from churn).
func (r *recorder) delivery(shard int, k int, sent, now time.Time, measure bool) {
	r.delivered.Add(1)
	if r.measured(now) {
		r.mDelivered.Add(1)
	}
	if !measure {
		r.catchup.Add(1)
		return
	}
	if !r.measuredSend(k) {
		return
	}
	if r.finalPull.Load() {
		r.late.Add(1)
		return
	}
	r.e2e.record(shard, now.Sub(sent))
}

// sendDone records the outcome of Send k, issued at sent.
func (r *recorder) sendDone(shard, k int, sent time.Time, err error) {
	if err != nil {
		r.failed.Add(1)
		r.error(err)
		return
	}
	r.accepted.Add(1)
	if r.measured(time.Now()) {
		r.acceptedIn.Add(1)
	}
	if r.measuredSend(k) {
		r.mAccepted.Add(1)
		r.accept.record(shard, time.Since(sent))
	}
}

// onError is the clients' OnError. The SDK may report its own Close as a
// disconnect (normal closure, 1000); those are not the server's errors.
func (r *recorder) onError(err error) {
	if !r.closing.Load() {
		r.error(err)
	}
}

// onReceipts is the clients' OnReceipts.
func (r *recorder) onReceipts(rc protocol.Receipts) {
	r.receiptFrames.Add(1)
	r.receiptCounts.Add(int64(len(rc.Counts)))
}

// addChurned adds the counters of a client churn closed.
func (r *recorder) addChurned(s client.Stats) {
	r.errMu.Lock()
	r.churned.add(s)
	r.errMu.Unlock()
}

func (r *recorder) churnedStats() sdkStats {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.churned
}

// error counts err under its code.
func (r *recorder) error(err error) {
	code := errorCode(err)
	r.errMu.Lock()
	r.errs[code]++
	r.errMu.Unlock()
}

func (r *recorder) errors() map[string]int64 {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return maps.Clone(r.errs)
}

func (r *recorder) errorCount() int64 {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	var n int64
	for _, v := range r.errs {
		n += v
	}
	return n
}

// errorCode names err: the protocol code the server answered, the close
// code a disconnect carried, or what ended the wait.
func errorCode(err error) string {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return string(pe.Code)
	case errors.Is(err, errDial):
		return "dial_failed"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, client.ErrClosed):
		return "client_closed"
	case errors.Is(err, errNoSender):
		return "no_connected_sender"
	case errors.Is(err, client.ErrDisconnected):
		if code := websocket.CloseStatus(err); code != -1 {
			return "disconnected_" + strconv.Itoa(int(code))
		}
		return "disconnected"
	}
	return "other"
}

// quantiles of a histogram in milliseconds.
type quantiles struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

func quantilesOf(h *hdr.Histogram) quantiles {
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return quantiles{
		Count: h.TotalCount(),
		P50:   ms(h.ValueAtQuantile(50)),
		P90:   ms(h.ValueAtQuantile(90)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
		Mean:  h.Mean() / 1000,
	}
}
