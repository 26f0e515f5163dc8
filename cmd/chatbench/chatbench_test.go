package main

import (
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// searchAgainst runs a rateSearch against a system whose steps pass up to
// and including capacity, and returns the rates tried and the best found.
func searchAgainst(s *rateSearch, capacity float64) (tried []float64, best float64) {
	for {
		r, ok := s.next()
		if !ok {
			return tried, s.best()
		}
		tried = append(tried, r)
		s.record(r, r <= capacity)
	}
}

func TestRateSearchDoublesThenBisects(t *testing.T) {
	tried, best := searchAgainst(newRateSearch(100, 50000, 0.1, 20), 1000)
	want := []float64{100, 200, 400, 800, 1600, 1200, 1000, 1100}
	if !equalRates(tried, want) {
		t.Fatalf("tried %v, want %v", tried, want)
	}
	if best != 1000 {
		t.Fatalf("best %g, want 1000", best)
	}
}

func TestRateSearchBracketWithinTolerance(t *testing.T) {
	for _, capacity := range []float64{137, 2500, 9999, 31000} {
		tried, best := searchAgainst(newRateSearch(100, 50000, 0.05, 30), capacity)
		if best > capacity || best < capacity/1.06 {
			t.Errorf("capacity %g: best %g after %v, want within 5%% below it", capacity, best, tried)
		}
	}
}

func TestRateSearchHalvesWhenTheStartFails(t *testing.T) {
	tried, best := searchAgainst(newRateSearch(1000, 50000, 0.1, 20), 300)
	if tried[0] != 1000 || tried[1] != 500 || tried[2] != 250 {
		t.Fatalf("tried %v, want 1000, 500, 250 first", tried)
	}
	if best < 270 || best > 300 {
		t.Fatalf("best %g, want 270..300", best)
	}
	// Nothing passes: it gives up at start/8 rather than go on forever.
	tried, best = searchAgainst(newRateSearch(1000, 50000, 0.1, 20), 0)
	if best != 0 || len(tried) != 4 || tried[3] != 125 {
		t.Fatalf("tried %v (best %g), want 1000, 500, 250, 125 and no best", tried, best)
	}
}

func TestRateSearchStopsAtMaxRateAndMaxSteps(t *testing.T) {
	tried, best := searchAgainst(newRateSearch(100, 700, 0.1, 20), math.Inf(1))
	if !equalRates(tried, []float64{100, 200, 400, 700}) || best != 700 {
		t.Fatalf("tried %v best %g, want 100 200 400 700 and 700", tried, best)
	}
	tried, _ = searchAgainst(newRateSearch(100, 50000, 0.01, 3), 1000)
	if len(tried) != 3 {
		t.Fatalf("tried %v, want 3 steps", tried)
	}
}

func TestRateSearchNoisyPassAboveAFailure(t *testing.T) {
	s := newRateSearch(100, 50000, 0.1, 20)
	s.record(100, true)
	s.record(200, false)
	s.record(150, true)
	s.record(300, true) // a pass above the failure: the failure was noise
	if r, ok := s.next(); !ok || r != 600 {
		t.Fatalf("next %g %v, want 600: search above the new pass", r, ok)
	}
}

func equalRates(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRoundRate(t *testing.T) {
	for in, want := range map[float64]float64{1234: 1230, 1250: 1250, 99.94: 99.9, 12345: 12300, 7: 7, 0.5: 0.5} {
		if got := roundRate(in); math.Abs(got-want) > 1e-9 {
			t.Errorf("roundRate(%g) = %g, want %g", in, got, want)
		}
	}
}

func TestFmtRate(t *testing.T) {
	for in, want := range map[float64]string{roundRate(15.7): "15.7", 12.5: "12.5", 1230: "1230", 99.94: "99.9", 50000: "50000", 6.25: "6.25"} {
		if got := fmtRate(in); got != want {
			t.Errorf("fmtRate(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestJudge(t *testing.T) {
	good := func() *result {
		r := &result{}
		r.Loss.OK = true
		r.Sends.MeasuredScheduled, r.Sends.MeasuredAccepted = 1000, 1000
		r.EndToEnd = quantiles{Count: 50000, P99: 40}
		return r
	}
	if ok, why := judge(good(), 100*time.Millisecond); !ok {
		t.Fatalf("a good step failed: %s", why)
	}
	for why, spoil := range map[string]func(r *result){
		"loss check failed":           func(r *result) { r.Loss.OK = false },
		"sends not accepted":          func(r *result) { r.Sends.MeasuredAccepted = 980 },
		"no measured push":            func(r *result) { r.EndToEnd.Count = 0 },
		"pushed too late":             func(r *result) { r.Pushes.Late = 1 },
		"p99 over the target":         func(r *result) { r.EndToEnd.P99 = 100.5 },
		"loss check failed (offline)": func(r *result) { r.Offline = &offlineResult{} }, // its Loss.OK is false
	} {
		r := good()
		spoil(r)
		ok, got := judge(r, 100*time.Millisecond)
		if want, _, _ := strings.Cut(why, " ("); ok || !strings.Contains(got, want) {
			t.Errorf("%s: judged ok=%v, why %q", why, ok, got)
		}
	}
}

// TestPlotRendersAPNG renders fixed steps and checks the file decodes as a
// PNG of the documented size.
func TestPlotRendersAPNG(t *testing.T) {
	steps := []step{
		{Rate: 400, Pass: true, EndToEnd: quantiles{Count: 10, P50: 4, P90: 8, P99: 30, P999: 60}},
		{Rate: 100, Pass: true, EndToEnd: quantiles{Count: 10, P50: 3, P90: 5, P99: 9, P999: 20}},
		{Rate: 1600, Pass: false, EndToEnd: quantiles{Count: 10, P50: 900, P90: 4000, P99: 9000, P999: 9500}},
		{Rate: 3200, Pass: false}, // never pushed: left out
	}
	path := filepath.Join(t.TempDir(), "latency.png")
	if err := plotLatency(path, "test", steps, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 768 || b.Dy() != 480 {
		t.Fatalf("PNG is %dx%d, want 768x480", b.Dx(), b.Dy())
	}
}

func TestCheckOneSeparatesRedeliveryFromDuplicates(t *testing.T) {
	accepted := []sendRef{{10, 0, 0}, {11, 1, 0}, {12, 2, 0}, {13, 3, 0}}
	// Client 1 was handed 10, 11, then churned away before acking 11; client
	// 2 starts at the ack cursor (10) and is handed 11, 12, 13.
	var l lossCheck
	l.checkOne("g", "u", groupLog{accepted: accepted}, []sendRef{{10, 0, 1}, {11, 1, 1}, {11, 1, 2}, {12, 2, 2}, {13, 3, 2}})
	l.verdict()
	if !l.OK || l.Redelivered != 1 || l.Duplicates != 0 || l.OutOfOrder != 0 {
		t.Fatalf("churn redelivery judged %+v, want OK with 1 redelivered", l)
	}
	// The same msgid twice from one client is a duplicate; a smaller msgid
	// after a larger one from one client is out of order; a send never
	// handed over is missing.
	l = lossCheck{}
	l.checkOne("g", "u", groupLog{accepted: accepted}, []sendRef{{10, 0, 1}, {12, 2, 1}, {11, 1, 1}, {11, 1, 1}})
	l.verdict()
	if l.OK || l.Duplicates != 1 || l.OutOfOrder != 1 || l.Missing != 1 {
		t.Fatalf("judged %+v, want 1 duplicate, 1 out of order, 1 missing", l)
	}
	// A body under another msgid than the sender was told: renumbered, not missing.
	l = lossCheck{}
	l.checkOne("g", "u", groupLog{accepted: accepted[:1]}, []sendRef{{9, 0, 1}})
	l.verdict()
	if !l.OK || l.Renumbered != 1 || l.Unexpected != 1 {
		t.Fatalf("judged %+v, want renumbered 1, unexpected 1, OK", l)
	}
}

func TestBodyRoundTrip(t *testing.T) {
	b := &bench{cfg: &Config{Prefix: "bx", BodySize: 64}}
	sent := time.Unix(1700000000, 123456789)
	body := b.body(sent, 4711)
	if len(body) != 64 {
		t.Fatalf("body of %d bytes, want 64", len(body))
	}
	got, k, ok := b.parseBody(body)
	if !ok || !got.Equal(sent) || k != 4711 {
		t.Fatalf("parseBody = %v %d %v, want %v 4711 true", got, k, ok, sent)
	}
	for _, foreign := range []string{"hello", "by.1.2.", "bx.x.1.", "bx.1.", "bx.1.99999999999."} {
		if _, k, ok := b.parseBody(foreign); ok || k != -1 {
			t.Errorf("parseBody(%q) accepted", foreign)
		}
	}
}

func TestSampleMarksTheFraction(t *testing.T) {
	for _, f := range []float64{0, 0.1, 0.5, 1} {
		n := 0
		for id := int64(0); id < 20000; id++ {
			if sample(id, int(id%7), f) {
				n++
			}
		}
		if got := float64(n) / 20000; math.Abs(got-f) > 0.02 {
			t.Errorf("sample(%g) marked %.3f", f, got)
		}
	}
}

func TestRecordsPerMessage(t *testing.T) {
	before := topicEnds{ends: map[string]int64{"chat.messages": 100, "chat.acks": 50, "chat.receipts": 7}}
	after := topicEnds{ends: map[string]int64{"chat.messages": 1100, "chat.acks": 1050, "chat.receipts": 207}}
	r := recordsPerMessage(before, after)
	r.perDelivery(10000)
	if !r.Known || r.Messages != 1000 || r.AcksPerMsg != 1 || r.ReceiptsPerMsg != 0.2 || r.AcksPerDel != 0.1 || r.ReceiptsPerDel != 0.02 {
		t.Fatalf("records %+v", r)
	}
	if r := recordsPerMessage(topicEnds{}, topicEnds{}); r.Known {
		t.Fatal("known without a broker")
	}
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for _, args := range [][]string{
		{"-admin-token", "t", "-online", "1.5"},
		{"-admin-token", "t", "-read", "1.5"},
		{"-admin-token", "t", "-sweep", "10,x"},
		{"-admin-token", "t", "-sweep", "10", "-find-max"},
		{"-admin-token", "t", "-redis"},
		{"-admin-token", "t", "-pull", "1000"},
		{"-chatd", "/nonexistent/chatd"},
		{"-admin-token", "t", "-page-size", "5000"},
	} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
	c, err := parseConfig([]string{"-admin-token", "t", "-sweep", "50, 100,200"}, func(string) string { return "" }, io.Discard)
	if err != nil || !equalRates(c.Sweep, []float64{50, 100, 200}) {
		t.Fatalf("-sweep: %v %v", c, err)
	}
}

// The search's summary says what its passing steps kept: a step with 0.5%
// of its sends failed passes (99% must be accepted), so the summary must
// not claim that every send was.
func TestTheSearchSummarySaysWhatAPassKept(t *testing.T) {
	r := &result{}
	r.Loss.OK = true
	r.Sends.MeasuredScheduled, r.Sends.MeasuredAccepted = 1000, 995
	r.EndToEnd = quantiles{Count: 50000, P99: 40}
	pass, why := judge(r, 100*time.Millisecond)
	if !pass {
		t.Fatalf("a step with 995 of 1000 sends accepted failed: %s", why)
	}
	var out strings.Builder
	printSteps(&out, &sweepResult{Mode: "find-max", TargetMS: 100, Steps: []step{{Rate: 100, Pass: true}}, Best: 100})
	if strings.Contains(out.String(), "every send accepted") || !strings.Contains(out.String(), "99%") {
		t.Fatalf("the summary of a search whose best step lost 0.5%% of its sends reads:\n%s", out.String())
	}
}

// -h lists the flags without the admin token the environment gave: it
// went to terminals and CI logs as -admin-token's default. The token
// still comes from the environment.
func TestHelpLeavesOutTheAdminToken(t *testing.T) {
	env := func(k string) string { return map[string]string{"CHAT_ADMIN_TOKEN": "hunter2-admin"}[k] }
	var out strings.Builder
	if _, err := parseConfig([]string{"-h"}, env, &out); err == nil || strings.Contains(out.String(), "hunter2") || !strings.Contains(out.String(), "-admin-token") {
		t.Fatalf("chatbench -h: %v\n%s\nwant the flags without the token", err, out.String())
	}
	c, err := parseConfig([]string{"-url", "http://127.0.0.1:1"}, env, io.Discard)
	if err != nil || c.AdminToken != "hunter2-admin" {
		t.Fatalf("the token from CHAT_ADMIN_TOKEN: %q, %v", c.AdminToken, err)
	}
}
