package main

import (
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// benchFlags are the flags FuzzParseConfig sets: every one that shapes the
// run, none that reads a file or starts a process.
var benchFlags = []string{
	"url", "kafka", "users", "groups", "group-size", "online", "rate", "duration", "warmup", "drain", "body-size",
	"ack-every", "ack-interval", "page-size", "read", "churn", "churn-offline", "offline-check", "send-timeout",
	"concurrency", "prefix", "idle", "idle-settle", "pull", "pull-users", "sweep", "find-max", "max-rate",
	"p99-target", "tolerance", "max-steps",
}

// everyPositive reports whether events at rate per second have an
// interval a time.Duration holds, as the send schedule (drain.go) and the
// churn ticker (churn.go) take it: a positive number of nanoseconds.
func everyPositive(rate float64) bool {
	d := float64(time.Second) / rate
	return d >= 1 && d < math.MaxInt64
}

// runnable says what is wrong with a config for the run it selects, from
// how the run uses each value; nil when nothing is.
func runnable(c *Config) string {
	for _, u := range c.URLs {
		if p, err := url.Parse(u); err != nil || p.Scheme != "http" && p.Scheme != "https" || p.Host == "" {
			return "a URL that is no gateway's"
		}
	}
	if schema.ValidID(c.Prefix+"-u0") != nil {
		return "a prefix that makes no ids"
	}
	switch {
	case c.Idle > 0:
		return ""
	case c.Groups < 1 || c.GroupSize < 1 || c.GroupSize > c.Users || c.BodySize < 40 || c.PageSize < 0 || c.PageSize > protocol.MaxLimit:
		return "a load of no shape"
	case c.Pull > 0:
		if c.PullUsers < 1 || c.PullUsers >= c.GroupSize {
			return "pullers without a sender"
		}
		return ""
	case !everyPositive(c.Rate):
		return "a rate whose sends have no interval"
	case !(c.Online > 0 && c.Online <= 1):
		return "a fraction online outside (0, 1]"
	case !(c.Read >= 0 && c.Read <= 1):
		return "a fraction read outside [0, 1]"
	case !(c.Churn == 0 || everyPositive(c.Churn)):
		return "a churn whose ticks have no interval"
	case c.Duration <= 0 || c.Warmup < 0 || c.Drain < 0 || c.ChurnOffline < 0:
		return "a negative time"
	}
	for _, r := range c.Sweep {
		if !everyPositive(r) {
			return "a sweep rate whose sends have no interval"
		}
	}
	if c.FindMax && (!everyPositive(c.MaxRate) || c.MaxRate < c.Rate || c.Target <= 0 || !(c.Tolerance > 0) || c.MaxSteps < 1) {
		return "a search with no bracket"
	}
	return ""
}

// FuzzParseConfig gives chatbench any two of its flags, with any values.
// It refuses, or takes a config that can run in the mode it selects: the
// rates it sends, sweeps and searches at, and the churn, have intervals
// that are positive durations, and its fractions lie in their ranges.
func FuzzParseConfig(f *testing.F) {
	index := func(name string) uint8 {
		for i, n := range benchFlags {
			if n == name {
				return uint8(i)
			}
		}
		f.Fatalf("no flag %s", name)
		return 0
	}
	for _, c := range [][4]string{
		{"rate", "500", "duration", "10s"},
		{"rate", "0", "online", "0.5"},
		{"rate", "-1", "read", "1.5"},
		{"sweep", "50,100,200", "rate", "10"},
		{"sweep", "50,,0", "find-max", "true"},
		{"find-max", "true", "max-rate", "100"},
		{"churn", "2", "churn-offline", "1s"},
		{"idle", "100", "rate", "-5"},
		{"pull", "1000", "kafka", "127.0.0.1:9092"},
		{"url", "ws://x", "prefix", "a b"},
		{"body-size", "39", "page-size", "100000"},
		{"group-size", "10", "users", "5"},
		// Taken once, to fail in the run: a churn ticker of no interval
		// (time.NewTicker panics), sends of none (a schedule without end),
		// NaN fractions and rates.
		{"churn", "1e10", "kafka", "0"},
		{"churn", "+Inf", "rate", "10"},
		{"churn", "NaN", "rate", "10"},
		{"churn", "1e-300", "rate", "10"},
		{"rate", "2e9", "duration", "1s"},
		{"rate", "NaN", "online", "1"},
		{"online", "NaN", "read", "NaN"},
		{"sweep", "50,inf", "rate", "10"},
		{"sweep", "NaN", "rate", "10"},
		{"find-max", "true", "max-rate", "NaN"},
		{"find-max", "true", "tolerance", "NaN"},
	} {
		f.Add(index(c[0]), c[1], index(c[2]), c[3])
	}
	f.Fuzz(func(t *testing.T, a uint8, va string, b uint8, vb string) {
		args := []string{"-admin-token=t",
			"-" + benchFlags[int(a)%len(benchFlags)] + "=" + va,
			"-" + benchFlags[int(b)%len(benchFlags)] + "=" + vb}
		c, err := parseConfig(args, func(string) string { return "" }, io.Discard)
		if err != nil {
			return
		}
		if why := runnable(c); why != "" {
			t.Fatalf("chatbench %q: taken, with %s: %+v", args, why, *c)
		}
	})
}

// FuzzParseRates feeds -sweep any value. Each field between commas,
// trimmed, is a rate as strconv reads it, an empty one is none, and one
// that does not read refuses the list, naming -sweep and the field; rates
// written as chatbench prints them read back as themselves.
func FuzzParseRates(f *testing.F) {
	for _, s := range []string{"50,100,200,400", "", ",", " 25 , 50 ", "1e3,1.5", "50,x", "NaN", "inf,-1", "0x1p4", "1_000"} {
		f.Add(s, 50.0, 1e3)
	}
	f.Add("", math.Inf(1), math.NaN())
	f.Fuzz(func(t *testing.T, s string, r1, r2 float64) {
		got, err := parseRates(s)
		var want []float64
		var bad string
		for _, field := range strings.Split(s, ",") {
			if field = strings.TrimSpace(field); field == "" {
				continue
			}
			v, err := strconv.ParseFloat(field, 64)
			if err != nil {
				bad = field
				break
			}
			want = append(want, v)
		}
		if bad != "" {
			if err == nil || !strings.Contains(err.Error(), "-sweep") || !strings.Contains(err.Error(), strconv.Quote(bad)) {
				t.Fatalf("parseRates(%q) = %v, %v; want a refusal naming -sweep and %q", s, got, err, bad)
			}
			return
		}
		if err != nil || !sameRates(got, want) {
			t.Fatalf("parseRates(%q) = %v, %v; want %v", s, got, err, want)
		}

		rates := []float64{r1, r2}
		written := strconv.FormatFloat(r1, 'g', -1, 64) + "," + strconv.FormatFloat(r2, 'g', -1, 64)
		if got, err := parseRates(written); err != nil || !sameRates(got, rates) {
			t.Fatalf("%v written as %q, read as %v, %v", rates, written, got, err)
		}
	})
}

// sameRates compares rates bit for bit: NaN is itself.
func sameRates(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) && !(math.IsNaN(a[i]) && math.IsNaN(b[i])) {
			return false
		}
	}
	return true
}
