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
		Gateways    []string `json:"gateways"`
		Prefix      string   `json:"prefix"`
		Users       int      `json:"users"`
		Online      int      `json:"online"`
		Groups      int      `json:"groups"`
		GroupSize   int      `json:"group_size"`
		Rate        float64  `json:"rate_per_s"`
		DurationS   float64  `json:"duration_s"`
		WarmupS     float64  `json:"warmup_s"`
		BodySize    int      `json:"body_size"`
		AckEvery    int      `json:"ack_every"`
		AckInterval string   `json:"ack_interval"`
	} `json:"setup"`
	Sends struct {
		Scheduled         int64   `json:"scheduled"` // warm-up included
		Accepted          int64   `json:"accepted"`
		Failed            int64   `json:"failed"`
		MeasuredScheduled int64   `json:"measured_scheduled"`
		MeasuredAccepted  int64   `json:"measured_accepted"`
		AcceptedPerS      float64 `json:"accepted_per_s"` // measured accepted / duration
	} `json:"sends"`
	AcceptLatency quantiles `json:"accept_latency"` // send -> accepted
	EndToEnd      quantiles `json:"end_to_end"`     // send -> OnMessage, every online member
	SchedulerLag  quantiles `json:"scheduler_lag"`  // how late sends were issued (the generator's health)
	Pushes        struct {
		DeliveredPerS float64 `json:"delivered_per_s"` // OnMessage calls per second within the measured span
		OfferedPerS   float64 `json:"offered_per_s"`   // rate × online members per group: what a keeping-up server delivers
		Late          int64   `json:"late"`            // measured messages that arrived only with the final pull
	} `json:"pushes"`
	Errors   map[string]int64 `json:"errors"`
	SDK      sdkStats         `json:"sdk"`
	Loss     lossCheck        `json:"loss"`
	CPU      cpuUse           `json:"cpu"` // over the measured span
	Timeline []tick           `json:"timeline"`
}

// sdkStats sums client.Stats over every member.
type sdkStats struct {
	Pushes, Pulled, Duplicates, Gaps, Pulls, Delivered, Acks, Resends, Reconnects int64
}

func (s *sdkStats) add(t client.Stats) {
	s.Pushes += t.Pushes
	s.Pulled += t.Pulled
	s.Duplicates += t.Duplicates
	s.Gaps += t.Gaps
	s.Pulls += t.Pulls
	s.Delivered += t.Delivered
	s.Acks += t.Acks
	s.Resends += t.Resends
	s.Reconnects += t.Reconnects
}

func (r *result) fill(cfg *Config, p *plan, b *bench) {
	s := &r.Setup
	s.Gateways, s.Prefix = cfg.URLs, cfg.Prefix
	s.Users, s.Online, s.Groups, s.GroupSize = len(p.uids), len(p.online), len(p.gids), cfg.GroupSize
	s.Rate, s.DurationS, s.WarmupS, s.BodySize = cfg.Rate, cfg.Duration.Seconds(), cfg.Warmup.Seconds(), cfg.BodySize
	s.AckEvery, s.AckInterval = cfg.AckEvery, cfg.AckInterval.String()
	if s.AckEvery == 0 {
		s.AckEvery = 10
	}
	if cfg.AckInterval == 0 {
		s.AckInterval = "1s"
	}

	rec := b.rec
	r.Sends.Scheduled, r.Sends.Accepted, r.Sends.Failed = rec.scheduled.Load(), rec.accepted.Load(), rec.failed.Load()
	r.Sends.MeasuredScheduled, r.Sends.MeasuredAccepted = rec.mScheduled.Load(), rec.mAccepted.Load()
	r.Sends.AcceptedPerS = float64(r.Sends.MeasuredAccepted) / cfg.Duration.Seconds()
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
	r.Pushes.Late = rec.late.Load()
	r.Errors = rec.errors()
}

func (r *result) print(w io.Writer) {
	s := r.Setup
	fmt.Fprintf(w, "chatbench %s: %d groups × %d members, %d users, %d online, %d gateway(s); %.0f msg/s for %.0fs after %.0fs warm-up; body %d B; ack every %d / %s\n",
		s.Prefix, s.Groups, s.GroupSize, s.Users, s.Online, len(s.Gateways), s.Rate, s.DurationS, s.WarmupS, s.BodySize, s.AckEvery, s.AckInterval)
	fmt.Fprintf(w, "sends:        %d scheduled, %d accepted, %d failed (warm-up included); measured: %d accepted = %.1f/s\n",
		r.Sends.Scheduled, r.Sends.Accepted, r.Sends.Failed, r.Sends.MeasuredAccepted, r.Sends.AcceptedPerS)
	fmt.Fprintf(w, "accept:       %s\n", r.AcceptLatency)
	fmt.Fprintf(w, "end-to-end:   %s\n", r.EndToEnd)
	fmt.Fprintf(w, "pushes:       %.0f delivered/s (offered %.0f/s); %d measured messages came only with the final pull\n",
		r.Pushes.DeliveredPerS, r.Pushes.OfferedPerS, r.Pushes.Late)
	fmt.Fprintf(w, "sdk:          %d by push, %d by pull (%d pulls), %d duplicates dropped, %d gaps, %d acks, %d resends, %d reconnects\n",
		r.SDK.Pushes, r.SDK.Pulled, r.SDK.Pulls, r.SDK.Duplicates, r.SDK.Gaps, r.SDK.Acks, r.SDK.Resends, r.SDK.Reconnects)
	fmt.Fprintf(w, "errors:       %s\n", formatErrors(r.Errors))
	l := r.Loss
	verdict := "OK"
	if !l.OK {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "loss check:   %s: %d members, %d expected, %d delivered; missing %d (%d before the final pulls, %d rounds), duplicates %d, out of order %d, same body under two msgids %d\n",
		verdict, l.Members, l.Expected, l.Delivered, l.Missing, l.MissingAfterDrain, l.PullRounds, l.Duplicates, l.OutOfOrder, l.BodyDuplicates)
	fmt.Fprintf(w, "              renumbered %d (the accepted msgid never came, the same body did under another), unexpected msgids %d, foreign %d\n",
		l.Renumbered, l.Unexpected, l.Foreign)
	for _, ex := range l.Examples {
		got := "never came"
		if ex.GotMsgID != nil {
			got = fmt.Sprintf("came as msgid %d", *ex.GotMsgID)
		}
		fmt.Fprintf(w, "              e.g. %s msgid %d (send %d) to %s: %s\n", ex.Gid, ex.MsgID, ex.Send, ex.Uid, got)
	}
	fmt.Fprintf(w, "cpu:          server %.2f cores, chatbench %.2f cores (measured span); scheduler lag %s\n", r.CPU.Server, r.CPU.Bench, r.SchedulerLag)
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
