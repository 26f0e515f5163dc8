package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParseBody reads back the bodies chatbench sends, and reads any
// other. A body it writes reads as the send time and number it carries,
// whatever the prefix and body size; of any body, it takes only one of
// this run's prefix, at the body size (or longer when the header is), and
// one whose numbers are written as chatbench writes them is the very
// body it would send.
func FuzzParseBody(f *testing.F) {
	sent := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC).UnixNano()
	for _, c := range []struct {
		prefix string
		size   uint16
		body   string
	}{
		{"bq3kx7m2a", 64, "bq3kx7m2a.1767225600123456789.7." + strings.Repeat("x", 64-32)},
		{"bq3kx7m2a", 64, "bq3kx7m2a.1767225600123456789.7." + strings.Repeat("x", 64-33)},
		{"bq3kx7m2a", 40, "bq3kx7m2a.1767225600123456789.2147483648."},
		{"bq3kx7m2a", 40, "bq3kx7m2a.+1767225600123456789.007."},
		{"bq3kx7m2a", 40, "bq3kx7m2a.-5.-1.xxxxxxxxxxxxxxxxxxxxxxxx"},
		{"b.1", 40, "b.1.5.6.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},
		{"b", 40, "b.1.5.6.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},
		{"b", 40, "hello"},
		{"", 40, ".1.2.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},
	} {
		f.Add(c.prefix, c.size, sent, int32(7), c.body)
	}
	f.Fuzz(func(t *testing.T, prefix string, size uint16, ns int64, k int32, body string) {
		b := &bench{cfg: &Config{Prefix: prefix, BodySize: 40 + int(size)%(16<<10-39)}}
		mine := b.body(time.Unix(0, ns), int(k))
		if at, kk, ok := b.parseBody(mine); !ok || at.UnixNano() != ns || kk != k {
			t.Fatalf("send %d at %d written as %q, read as %d at %d, %v", k, ns, mine, kk, at.UnixNano(), ok)
		}

		at, kk, ok := b.parseBody(body)
		if !ok {
			if kk != -1 || !at.IsZero() {
				t.Fatalf("%q refused as %d at %v; want -1 and no time", body, kk, at)
			}
			return
		}
		rest, mineToo := strings.CutPrefix(body, prefix+".")
		fields := strings.SplitN(rest, ".", 3)
		header := len(body) - len(fields[2])
		if !mineToo || len(body) != max(b.cfg.BodySize, header) || strings.Trim(fields[2], "x") != "" {
			t.Fatalf("%q (prefix %q, size %d) taken as send %d at %d", body, prefix, b.cfg.BodySize, kk, at.UnixNano())
		}
		canonical := fields[0] == strconv.FormatInt(at.UnixNano(), 10) && fields[1] == strconv.Itoa(int(kk))
		if again := b.body(at, int(kk)); canonical && again != body {
			t.Fatalf("%q taken as send %d at %d, which is sent as %q", body, kk, at.UnixNano(), again)
		}
	})
}
