package store

import (
	"context"
	"errors"
	"maps"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// fuzzRedis is a store on a miniredis of its own, for the fuzz targets
// that read what they plant with the store's own reads: one per fuzzing
// process, flushed by each input.
func fuzzRedis(f *testing.F) (*Redis, *miniredis.Miniredis) {
	m := miniredis.RunT(f)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	f.Cleanup(func() { c.Close() })
	return newTestRedis(f, c, RedisConfig{}), m
}

// decimal reads s as a signed decimal that fits an int64: the reference
// for the store's numbers, by another road than strconv.
func decimal(s string) (int64, bool) {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || !n.IsInt64() || strings.Contains(s, "_") {
		return 0, false
	}
	return n.Int64(), true
}

// FuzzOffsets plants any value under any field of a consumer's hash,
// beside the positions SaveOffsets and ResetOffsets wrote there. Offsets
// reads a field as a position only when it is the topic's name, "/" and
// a partition number: the marks beside a position (handled, origin,
// replayed) and the positions of other topics never read as this topic's.
// A position that is no number is refused with ErrCorruptValue, never
// taken as 0 or as none; one that is reads as its number, and what
// SaveOffsets writes reads back.
func FuzzOffsets(f *testing.F) {
	r, m := fuzzRedis(f)
	ctx := context.Background()
	const consumer, topic = "chat.receipt-projector", "chat.receipts"
	for _, c := range []struct {
		field, value string
		saved        int64
	}{
		{"chat.receipts/2", "42", 17},
		{"chat.receipts/2", "-2", -2},
		{"chat.receipts/0", "9223372036854775807", 0},
		{"chat.receipts/2", "", 1},
		{"chat.receipts/2", "1e3", 1},
		{"chat.receipts/2", " 5", 1},
		{"chat.receipts/2", "9223372036854775808", 1},
		{"chat.receipts/0/handled", "junk", 5},
		{"chat.receipts/0/origin", "next", 5},
		{"chat.receipts/0/replayed", "x", 5},
		{"chat.receipts/x", "7", 5},
		{"chat.receipts/", "7", 5},
		{"chat.receipts.dlq/0", "junk", 5},
		{"chat.receipt/0", "junk", 5},
		{"chat.receipts/01", "7", 5},
		{"chat.receipts/+3", "7", 5},
		{"chat.receipts/-1", "7", 5},
	} {
		f.Add(c.field, c.value, c.saved)
	}
	f.Fuzz(func(t *testing.T, field, value string, saved int64) {
		m.FlushAll()
		// What the writers leave: partition 0 saved, partition 1 set back
		// by hand (a handled mark and an origin beside it), and the
		// positions of topics whose names this one's begins or ends.
		if err := r.SaveOffsets(ctx, consumer, topic, map[int]int64{0: saved, 1: 7}); err != nil {
			t.Fatal(err)
		}
		if err := r.ResetOffsets(ctx, consumer, topic, map[int]int64{1: 3}); err != nil {
			t.Fatal(err)
		}
		for _, other := range []string{"chat.receipt", "chat.receipts.dlq", "chat"} {
			if err := r.SaveOffsets(ctx, consumer, other, map[int]int64{0: 99, 2: 98}); err != nil {
				t.Fatal(err)
			}
		}
		want := map[int]int64{0: saved, 1: 3}
		if got, err := r.Offsets(ctx, consumer, topic); err != nil || !maps.Equal(got, want) {
			t.Fatalf("Offsets after SaveOffsets of %v = %v, %v", want, got, err)
		}

		m.HSet(offsetsKey(consumer), field, value)
		got, err := r.Offsets(ctx, consumer, topic)
		p, ours := strings.CutPrefix(field, topic+"/")
		part, perr := strconv.Atoi(p)
		if !ours || perr != nil {
			if err != nil || !maps.Equal(got, want) {
				t.Fatalf("%s = %q: Offsets = %v, %v; want %v (the field is no position of %s)", field, value, got, err, want, topic)
			}
			return
		}
		n, ok := decimal(value)
		if !ok {
			if !errors.Is(err, ErrCorruptValue) || got != nil {
				t.Fatalf("%s = %q: Offsets = %v, %v; want ErrCorruptValue", field, value, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s = %q: %v", field, value, err)
		}
		// A partition spelt otherwise than offsetField spells it (01, +1)
		// shares its number with a position the writers keep: the hash then
		// holds two of it, and either may be read. No writer spells one so.
		if old, both := want[part]; both && p != strconv.Itoa(part) && got[part] == old {
			n = old
		}
		want[part] = n
		if !maps.Equal(got, want) {
			t.Fatalf("%s = %q: Offsets = %v; want %v", field, value, got, want)
		}
	})
}

// FuzzSavedNumber feeds the reader of HMGET's fields in ResetOffsets any
// value: one absent, or not a number, is none (-1); a number reads as
// itself, so the positions SaveOffsets writes read back.
func FuzzSavedNumber(f *testing.F) {
	for _, s := range []string{"0", "42", "-2", "-1", "+7", "007", "", " 1", "1.0", "9223372036854775808", "-9223372036854775808"} {
		f.Add(s, false)
	}
	f.Add("", true)
	f.Fuzz(func(t *testing.T, s string, absent bool) {
		var v any = s
		if absent {
			v = nil
		}
		got := savedNumber(v)
		n, ok := decimal(s)
		switch {
		case absent || !ok:
			if got != -1 {
				t.Fatalf("savedNumber(%#v) = %d; want -1 (none)", v, got)
			}
		case got != n:
			t.Fatalf("savedNumber(%q) = %d; want %d", s, got, n)
		}
		if again := savedNumber(strconv.FormatInt(got, 10)); again != got {
			t.Fatalf("%d as SaveOffsets writes it reads as %d", got, again)
		}
	})
}

// FuzzParseHandled feeds the reader of a partition's handled mark any
// value. It takes three decimals joined by ":" (End, SkipFrom, SkipTo) as
// their numbers, one decimal alone (as a chatctl of before skips were
// kept wrote it) as End with no skip, and anything else as none (End -1):
// what it takes, String writes in a form read back as the same, and as
// the very bytes read when they were in the three-number form.
func FuzzParseHandled(f *testing.F) {
	for _, s := range []string{
		"500:0:0", "-1:0:0", "2000:500:2000", "-1:1000:3000", "9223372036854775807:-9223372036854775808:0",
		"+5:0:0", "05:1:2", "-0:0:0", "1:2", "3", "-1", "1:2:3:4", "1::3", "::", "", "a:b:c", " 1:2:3", "1:2:3\n", "9223372036854775808:0:0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := parseHandled(s)
		if n, ok := decimal(s); ok {
			if h != (Handled{End: n}) {
				t.Fatalf("parseHandled(%q) = %+v; want End %d, no skip", s, h, n)
			}
			if again := parseHandled(h.String()); again != h {
				t.Fatalf("%q read as %+v, written as %q, read back as %+v", s, h, h.String(), again)
			}
			return
		}
		parts := strings.Split(s, ":")
		var want [3]int64
		readable := len(parts) == 3
		for i := 0; readable && i < 3; i++ {
			want[i], readable = decimal(parts[i])
		}
		if !readable {
			if h != (Handled{End: -1}) {
				t.Fatalf("parseHandled(%q) = %+v; want none", s, h)
			}
			return
		}
		if h != (Handled{End: want[0], SkipFrom: want[1], SkipTo: want[2]}) {
			t.Fatalf("parseHandled(%q) = %+v; want %v", s, h, want)
		}
		if again := parseHandled(h.String()); again != h {
			t.Fatalf("%q read as %+v, written as %q, read back as %+v", s, h, h.String(), again)
		}
		canonical := true
		for i, p := range parts {
			canonical = canonical && p == strconv.FormatInt(want[i], 10)
		}
		if canonical != (h.String() == s) {
			t.Fatalf("%q read as %+v, written as %q", s, h, h.String())
		}
	})
}

// FuzzHandledRoundTrip writes any handled mark as ResetOffsets does and
// reads it back as itself: what a reset kept of a partition is what a
// replay of it is told.
func FuzzHandledRoundTrip(f *testing.F) {
	f.Add(int64(-1), int64(0), int64(0))
	f.Add(int64(2100), int64(1000), int64(3000))
	f.Add(int64(-9223372036854775808), int64(9223372036854775807), int64(-1))
	f.Fuzz(func(t *testing.T, end, from, to int64) {
		h := Handled{End: end, SkipFrom: from, SkipTo: to}
		if got := parseHandled(h.String()); got != h {
			t.Fatalf("%+v written as %q, read as %+v", h, h.String(), got)
		}
	})
}
