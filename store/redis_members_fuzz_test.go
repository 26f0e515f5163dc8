package store

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// canonicalMembership reports whether s writes its numbers as strconv
// does (the stored form): no "+", no leading zeros, no "-0".
func canonicalMembership(s string) bool {
	_, rest, _ := strings.Cut(s, ":")
	for _, p := range strings.Split(rest, ":") {
		if n, err := strconv.ParseInt(p, 10, 64); err != nil || strconv.FormatInt(n, 10) != p {
			return false
		}
	}
	return true
}

// FuzzParseMembership feeds the reader of stored memberships any value.
// It refuses with ErrCorruptValue, or takes a joined or left membership
// that encodes to a value read back as the same, and to the very bytes
// read when they were in the stored form.
func FuzzParseMembership(f *testing.F) {
	for _, s := range []string{
		"j:5", "j:-1", "l:3:9", "l:-1:-1", "l:5:5", "j:9223372036854775807", "l:0:-9223372036854775808",
		"j:+5", "j:007", "l:-0:1", "j:9223372036854775808", "l:3", "l:3:9:1", "j:1:2", "j:", "l::", "x:1", "", "j", "J:5", "j:1e3", "j: 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMembership(s)
		if err != nil {
			if !errors.Is(err, ErrCorruptValue) || m != (Membership{}) {
				t.Fatalf("parseMembership(%q) = %+v, %v; want the zero membership and ErrCorruptValue", s, m, err)
			}
			return
		}
		if m.State != MemberJoined && m.State != MemberLeft || m.State == MemberJoined && m.LeftAt != 0 {
			t.Fatalf("parseMembership(%q) = %+v", s, m)
		}
		enc := m.encode()
		if again, err := parseMembership(enc); err != nil || again != m {
			t.Fatalf("%q read as %+v, encoded as %q, read back as %+v, %v", s, m, enc, again, err)
		}
		if canonicalMembership(s) != (enc == s) {
			t.Fatalf("%q read as %+v, encoded as %q", s, m, enc)
		}
	})
}

// FuzzMembershipRoundTrip encodes any membership: a joined or left one
// reads back as itself, any other state encodes to a value refused.
func FuzzMembershipRoundTrip(f *testing.F) {
	f.Add(uint8(MemberJoined), int64(-1), int64(0))
	f.Add(uint8(MemberLeft), int64(3), int64(9))
	f.Add(uint8(MemberLeft), int64(-9223372036854775808), int64(9223372036854775807))
	f.Add(uint8(MemberNone), int64(0), int64(0))
	f.Add(uint8(7), int64(1), int64(2))
	f.Fuzz(func(t *testing.T, state uint8, joined, left int64) {
		m := Membership{State: MemberState(state), JoinedAt: joined, LeftAt: left}
		if m.State == MemberJoined {
			m.LeftAt = 0 // not kept for a member
		}
		got, err := parseMembership(m.encode())
		if m.State != MemberJoined && m.State != MemberLeft {
			if !errors.Is(err, ErrCorruptValue) {
				t.Fatalf("%+v encoded as %q, read as %+v, %v; want ErrCorruptValue", m, m.encode(), got, err)
			}
			return
		}
		if err != nil || got != m {
			t.Fatalf("%+v encoded as %q, read as %+v, %v", m, m.encode(), got, err)
		}
	})
}
