package store

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// FuzzParseMsgID feeds the reader of msgids (strings, and scores Redis
// writes as doubles) any value. It refuses with ErrCorruptValue, or takes
// an integer as strconv reads it, or a double that is whole, within 2^53
// and the value taken exactly. What it takes reads back from its integer
// form, and from the double forms of Redis and miniredis where those are exact.
func FuzzParseMsgID(f *testing.F) {
	for _, s := range []string{
		"0", "42", "-1", "9223372036854775807", "-9223372036854775808", "+7", "007",
		"1e+15", "1e+08", "9007199254740992", "9.007199254740992e+15", "9.007199254740994e+15", "-9.007199254740992e+15",
		"1.5", "1e-3", "0x1p4", "inf", "-Inf", "NaN", "9223372036854775808", "", " 1", "1_000", "1e400",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseMsgID(s)
		if err != nil {
			if !errors.Is(err, ErrCorruptValue) {
				t.Fatalf("parseMsgID(%q): %v does not wrap ErrCorruptValue", s, err)
			}
			return
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			if v != n {
				t.Fatalf("parseMsgID(%q) = %d, want %d", s, v, n)
			}
		} else if fv, err := strconv.ParseFloat(s, 64); err != nil || fv != float64(v) || math.Abs(fv) > 1<<53 {
			t.Fatalf("parseMsgID(%q) = %d, from the double %v (%v)", s, v, fv, err)
		}
		if again, err := parseMsgID(strconv.FormatInt(v, 10)); err != nil || again != v {
			t.Fatalf("%q read as %d, whose integer form reads as %d, %v", s, v, again, err)
		}
		if v < -1<<53 || v > 1<<53 {
			return
		}
		// Redis writes scores with %.17g, miniredis in the shortest form (1e+08).
		for _, prec := range []int{17, -1} {
			g := strconv.FormatFloat(float64(v), 'g', prec, 64)
			if again, err := parseMsgID(g); err != nil || again != v {
				t.Fatalf("%q read as %d, whose double form %q reads as %d, %v", s, v, g, again, err)
			}
		}
	})
}

// windowMember is a window member as the window's writer makes it.
func windowMember(m schema.Message) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(m.MsgID))
	return string(schema.AppendMessage(b, &m))
}

// FuzzDecodeWindowMember feeds the readers of window members any bytes.
// They refuse with ErrCorruptValue (a member of fewer than 8 bytes, or a
// message that does not decode), or take the msgid of the first 8 bytes
// and a message that, with it, encodes to the very bytes read: the
// message encoding has one form for each message, so every member taken
// is in the form written.
func FuzzDecodeWindowMember(f *testing.F) {
	for _, m := range []schema.Message{
		{MsgID: 42, Gid: "g1", Sender: "alice", ClientMsgID: "c-1", SentAt: 1767225600000, Body: []byte("hi")},
		{MsgID: 0, Gid: "g", Sender: "u", SentAt: -1, Body: []byte{}},
		{MsgID: math.MaxInt64, Gid: strings.Repeat("g", schema.MaxIDLen), Sender: "u", Body: []byte("é")},
		{MsgID: -1, Gid: "g", Sender: "u", Body: []byte("x")},
		{MsgID: 7, Gid: "g", Sender: "a b", Body: []byte("x")},  // an id not valid
		{MsgID: 7, Gid: "g", Sender: "u", Body: []byte("\xff")}, // not UTF-8
	} {
		s := windowMember(m)
		f.Add([]byte(s))
		f.Add([]byte(s[:len(s)-1]))
		f.Add([]byte(s + "\x00"))
	}
	f.Add([]byte{})
	f.Add([]byte("1234567"))
	f.Add([]byte("12345678"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := string(b)
		id, idErr := decodeWindowID(s)
		m, err := decodeWindowMember(s)
		if len(s) < 8 {
			if !errors.Is(idErr, ErrCorruptValue) || !errors.Is(err, ErrCorruptValue) {
				t.Fatalf("a member of %d bytes: %v, %v; want ErrCorruptValue", len(s), idErr, err)
			}
			return
		}
		if idErr != nil || id != int64(binary.BigEndian.Uint64(b)) {
			t.Fatalf("decodeWindowID(%x) = %d, %v", b, id, idErr)
		}
		if err != nil {
			if !errors.Is(err, ErrCorruptValue) {
				t.Fatalf("decodeWindowMember(%x): %v does not wrap ErrCorruptValue", b, err)
			}
			return
		}
		if m.MsgID != id {
			t.Fatalf("decodeWindowMember(%x) has msgid %d, decodeWindowID %d", b, m.MsgID, id)
		}
		if enc := windowMember(m); enc != s {
			t.Fatalf("%x decoded as %+v, which encodes as %x", b, m, enc)
		}
	})
}
