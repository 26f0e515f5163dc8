package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/groupchat/chatd/client"
)

// result is everything a load run reports; it is also the -json document.
type result struct {
	Setup struct {
		Gateways     []string `json:"gateways"`
		Prefix       string   `json:"prefix"`
		Users        int      `json:"users"`
		Online       int      `json:"online"`
		Groups       int      `json:"groups"`
		GroupSize    int      `json:"group_size"`
		Rate         float64  `json:"rate_per_s"`
		DurationS    float64  `json:"duration_s"`
		WarmupS      float64  `json:"warmup_s"`
		BodySize     int      `json:"body_size"`
		AckEvery     int      `json:"ack_every"`
		AckInterval  string   `json:"ack_interval"`
		Read         float64  `json:"read_fraction"`
		Churn        float64  `json:"churn_per_s"`
		ChurnOffline string   `json:"churn_offline"`
		Stack        string   `json:"stack"` // what chatbench started, or "given"
	} `json:"setup"`
	Sends struct {
		Scheduled         int64   `json:"scheduled"` // warm-up included
		Accepted          int64   `json:"accepted"`
		Failed            int64   `json:"failed"`
		MeasuredScheduled int64   `json:"measured_scheduled"`
		MeasuredAccepted  int64   `json:"measured_accepted"` // of the measured sends (due within the span), whenever accepted
		AcceptedInSpan    int64   `json:"accepted_in_span"`  // sends accepted within the span, whenever due
		AcceptedPerS      float64 `json:"accepted_per_s"`    // accepted in span / duration: the throughput
	} `json:"sends"`
	AcceptLatency quantiles `json:"accept_latency"` // send -> accepted
	EndToEnd      quantiles `json:"end_to_end"`     // send -> OnMessage, every online member
	SchedulerLag  quantiles `json:"scheduler_lag"`  // how late sends were issued (the generator's health)
	Pushes        struct {
		DeliveredPerS float64 `json:"delivered_per_s"` // OnMessage calls per second within the measured span
		OfferedPerS   float64 `json:"offered_per_s"`   // rate × online members per group: what a keeping-up server delivers
		Late          int64   `json:"late"`            // measured messages that arrived only with the final pull
		Catchup       int64   `json:"catchup"`         // handed to members back from churn, sent while they were away (not measured)
	} `json:"pushes"`
	Receipts struct {
		ReadMarks     int64   `json:"read_marks"` // MarkRead calls
		Pushes        int64   `json:"pushes"`     // receipts frames to senders
		Counts        int64   `json:"counts"`     // read counts they carried
		PushesPerSend float64 `json:"pushes_per_accepted_send"`
	} `json:"receipts"`
	Records  records                 `json:"records"` // chat.* records per message, from the broker
	Churn    struct{ Out, In int64 } `json:"churn"`
	Errors   map[string]int64        `json:"errors"`
	SDK      sdkStats                `json:"sdk"`
	Loss     lossCheck               `json:"loss"`              // the online members, by push
	Offline  *offlineResult          `json:"offline,omitempty"` // the offline members, by pull after the run
	CPU      cpuUse                  `json:"cpu"`               // over the measured span
	Timeline []tick                  `json:"timeline"`
}

// ok reports whether every member got every message exactly once.
func (r *result) ok() bool { return r.Loss.OK && (r.Offline == nil || r.Offline.Loss.OK) }

// sdkStats sums client.Stats over every client.
type sdkStats struct {
	Pushes, Pulled, Duplicates, Gaps, Pulls, Delivered, Acks, Reads, Resends, Reconnects int64
	Overloaded, Resyncs                                                                  int64
}

func (s *sdkStats) add(t client.Stats) {
	s.plus(sdkStats{t.Pushes, t.Pulled, t.Duplicates, t.Gaps, t.Pulls, t.Delivered, t.Acks, t.Reads, t.Resends, t.Reconnects, t.Overloaded, t.Resyncs})
}

func (s *sdkStats) plus(t sdkStats) {
	s.Pushes += t.Pushes
	s.Pulled += t.Pulled
	s.Duplicates += t.Duplicates
	s.Gaps += t.Gaps
	s.Pulls += t.Pulls
	s.Delivered += t.Delivered
	s.Acks += t.Acks
	s.Reads += t.Reads
	s.Resends += t.Resends
	s.Reconnects += t.Reconnects
	s.Overloaded += t.Overloaded
	s.Resyncs += t.Resyncs
}

func (r *result) fill(cfg *Config, p *plan, b *bench) {
	s := &r.Setup
	s.Gateways, s.Prefix = b.dep.URLs, cfg.Prefix
	s.Users, s.Online, s.Groups, s.GroupSize = len(p.uids), len(p.online), len(p.gids), cfg.GroupSize
	s.Rate, s.DurationS, s.WarmupS, s.BodySize = cfg.Rate, cfg.Duration.Seconds(), cfg.Warmup.Seconds(), cfg.BodySize
	s.AckEvery, s.AckInterval = cfg.AckEvery, cfg.AckInterval.String()
	if s.AckEvery == 0 {
		s.AckEvery = 10
	}
	if cfg.AckInterval == 0 {
		s.AckInterval = "1s"
	}
	s.Read, s.Churn, s.ChurnOffline = cfg.Read, cfg.Churn, cfg.ChurnOffline.String()
	s.Stack = cfg.Launch.String()

	rec := b.rec
	r.Sends.Scheduled, r.Sends.Accepted, r.Sends.Failed = rec.scheduled.Load(), rec.accepted.Load(), rec.failed.Load()
	r.Sends.MeasuredScheduled, r.Sends.MeasuredAccepted = rec.mScheduled.Load(), rec.mAccepted.Load()
	r.Sends.AcceptedInSpan = rec.acceptedIn.Load()
	r.Sends.AcceptedPerS = float64(r.Sends.AcceptedInSpan) / cfg.Duration.Seconds()
	r.AcceptLatency = quantilesOf(rec.accept.merged())
	r.EndToEnd = quantilesOf(rec.e2e.merged())
	r.SchedulerLag = quantilesOf(rec.lag.merged())
	r.Pushes.DeliveredPerS = float64(rec.mDelivered.Load()) / cfg.Duration.Seconds()
	isOnline := make([]bool, len(p.uids))
	for _, u := range p.online {
		isOnline[u] = true
	}
	// Senders are picked uniformly among (online member, group) pairs, so a
	// group gets messages in proportion to its online members.
	var pairs, weighted float64
	for g := range p.gids {
		n := float64(p.onlineIn(isOnline, g))
		pairs += n
		weighted += n * n
	}
	if pairs > 0 {
		r.Pushes.OfferedPerS = cfg.Rate * weighted / pairs
	}
	r.Pushes.Late, r.Pushes.Catchup = rec.late.Load(), rec.catchup.Load()
	r.Receipts.ReadMarks, r.Receipts.Pushes, r.Receipts.Counts = rec.readMarks.Load(), rec.receiptFrames.Load(), rec.receiptCounts.Load()
	if r.Sends.Accepted > 0 {
		r.Receipts.PushesPerSend = float64(r.Receipts.Pushes) / float64(r.Sends.Accepted)
	}
	r.Churn.Out, r.Churn.In = rec.churnOut.Load(), rec.churnIn.Load()
	r.Errors = rec.errors()
}

func (r *result) print(w io.Writer) {
	s := r.Setup
	fmt.Fprintf(w, "chatbench %s: %d groups × %d members, %d users, %d online, %d gateway(s); %.0f msg/s for %.0fs after %.0fs warm-up; body %d B; ack every %d / %s; stack: %s\n",
		s.Prefix, s.Groups, s.GroupSize, s.Users, s.Online, len(s.Gateways), s.Rate, s.DurationS, s.WarmupS, s.BodySize, s.AckEvery, s.AckInterval, s.Stack)
	if s.Read > 0 || s.Churn > 0 {
		fmt.Fprintf(w, "              read receipts: %.0f%% of delivered messages marked read; churn: %.2f members/s away for %s\n", 100*s.Read, s.Churn, s.ChurnOffline)
	}
	fmt.Fprintf(w, "sends:        %d scheduled, %d accepted, %d failed (warm-up included); measured: %d of %d due accepted; %d accepted within the span = %.1f/s\n",
		r.Sends.Scheduled, r.Sends.Accepted, r.Sends.Failed, r.Sends.MeasuredAccepted, r.Sends.MeasuredScheduled, r.Sends.AcceptedInSpan, r.Sends.AcceptedPerS)
	fmt.Fprintf(w, "accept:       %s\n", r.AcceptLatency)
	fmt.Fprintf(w, "end-to-end:   %s\n", r.EndToEnd)
	fmt.Fprintf(w, "pushes:       %.0f delivered/s (offered %.0f/s); %d measured messages came only with the final pull; %d caught up after churn\n",
		r.Pushes.DeliveredPerS, r.Pushes.OfferedPerS, r.Pushes.Late, r.Pushes.Catchup)
	fmt.Fprintf(w, "records:      %s\n", r.Records)
	fmt.Fprintf(w, "receipts:     %d read marks, %d receipt pushes to senders (%.4f per accepted send) carrying %d counts\n",
		r.Receipts.ReadMarks, r.Receipts.Pushes, r.Receipts.PushesPerSend, r.Receipts.Counts)
	fmt.Fprintf(w, "sdk:          %d by push, %d by pull (%d pulls), %d duplicates dropped, %d gaps, %d ack frames, %d read frames, %d resends (%d refused as overloaded), %d reconnects, %d resyncs the server asked for\n",
		r.SDK.Pushes, r.SDK.Pulled, r.SDK.Pulls, r.SDK.Duplicates, r.SDK.Gaps, r.SDK.Acks, r.SDK.Reads, r.SDK.Resends, r.SDK.Overloaded, r.SDK.Reconnects, r.SDK.Resyncs)
	if r.Churn.Out > 0 {
		fmt.Fprintf(w, "churn:        %d disconnects, %d reconnects\n", r.Churn.Out, r.Churn.In)
	}
	fmt.Fprintf(w, "errors:       %s\n", formatErrors(r.Errors))
	r.Loss.print(w, "online")
	if r.Offline != nil {
		r.Offline.print(w)
	}
	fmt.Fprintf(w, "cpu:          deployment %.2f cores (%s), chatbench %.2f cores (measured span); scheduler lag %s\n",
		r.CPU.Server, formatCores(r.CPU.ByProcess), r.CPU.Bench, r.SchedulerLag)
}

func (l *lossCheck) print(w io.Writer, who string) {
	verdict := "OK"
	if !l.OK {
		verdict = "FAILED"
	}
	missing := fmt.Sprintf("%d", l.Missing)
	if l.PullRounds > 0 {
		missing += fmt.Sprintf(" (%d before the final pulls, %d rounds)", l.MissingAfterDrain, l.PullRounds)
	}
	fmt.Fprintf(w, "loss check:   %s (%s): %d members, %d expected, %d delivered; missing %s, another send's body (or a garbled one) under an accepted msgid %d, duplicates %d, out of order %d, same body under two msgids %d, a msgid handed again with another body %d\n",
		verdict, who, l.Members, l.Expected, l.Delivered, missing, l.Mismatched, l.Duplicates, l.OutOfOrder, l.BodyDuplicates, l.Altered)
	fmt.Fprintf(w, "              of a group the member is not in %d; renumbered %d (the accepted msgid never came, the same body did under another); stray %d (under a msgid no send returned, no send made to the group)\n",
		l.NotMember, l.Renumbered, l.Stray)
	fmt.Fprintf(w, "              unexpected msgids %d (sends failed on their client that got in), missed by some member %d; redelivered after churn %d, foreign %d\n",
		l.Unexpected, l.MissingUnconfirmed, l.Redelivered, l.Foreign)
	for _, ex := range l.Examples {
		got := "never came"
		if ex.GotMsgID != nil {
			got = fmt.Sprintf("came as msgid %d", *ex.GotMsgID)
		}
		fmt.Fprintf(w, "              e.g. %s msgid %d (send %d) to %s: %s\n", ex.Gid, ex.MsgID, ex.Send, ex.Uid, got)
	}
	for _, f := range l.Faults {
		fmt.Fprintf(w, "              fault: %s\n", f)
	}
}

func (q quantiles) String() string {
	if q.Count == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  p99.9 %.1f ms  max %.1f ms  (n=%d)", q.P50, q.P90, q.P99, q.P999, q.Max, q.Count)
}

func formatErrors(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func formatCores(m map[string]float64) string {
	if len(m) == 0 {
		return "no pid watched"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func (r *result) writeJSON(path string) error {
	return writeJSONFile(path, r)
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
