package schema

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzDecodeMessage(f *testing.F) {
	fuzzDecode(f, DecodeMessage, AppendMessage, eqMessage, checkMessage)
}

func FuzzDecodeAck(f *testing.F) {
	fuzzDecode(f, DecodeAck, AppendAck, eq[Ack], func(a Ack) error { return checkCursor(a.Gid, a.Uid, a.Upto) })
}

func FuzzDecodeReceipt(f *testing.F) {
	fuzzDecode(f, DecodeReceipt, AppendReceipt, eq[Receipt], func(r Receipt) error { return checkCursor(r.Gid, r.Uid, r.Upto) })
}

func FuzzDecodeMember(f *testing.F) {
	fuzzDecode(f, DecodeMember, AppendMember, eq[Member], checkMember)
}

// fuzzDecode holds a decoder to its contract: it never panics, it fails only
// with the package's sentinels, and what it accepts is within the limits and
// is the one encoding of its value, so re-encoding gives back the same bytes.
func fuzzDecode[T any](f *testing.F, decode func([]byte) (T, error), appendT func([]byte, *T) []byte,
	equal func(a, b T) bool, check func(T) error) {
	for _, name := range []string{"message.golden", "ack.golden", "receipt.golden", "member.golden", "member_joined.golden"} {
		b := readGolden(f, name)
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(bytes.Clone(b), 0))
	}
	for _, b := range [][]byte{
		nil,
		{Version},
		{Version, 0},
		{2, byte(KindMessage)},
		{Version, byte(KindMember), 1, 'g', 1, 'u', 3, 0, 0, 0},
		{Version, byte(KindAck), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		[]byte("\x01\x01\x01g\x01u\x00\x02\x02\xff\xfe"),
	} {
		f.Add(b)
	}
	for _, b := range edgeSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownVersion) && !errors.Is(err, ErrWrongKind) {
				t.Fatalf("error %q matches no sentinel", err)
			}
			return
		}
		if err := check(v); err != nil {
			t.Fatalf("decoded %+v breaks a limit: %v", v, err)
		}
		enc := appendT(nil, &v)
		if !bytes.Equal(enc, b) {
			t.Fatalf("decoded %+v re-encodes differently:\n in % x\nout % x", v, b, enc)
		}
		v2, err := decode(enc)
		if err != nil {
			t.Fatalf("re-encoding of %+v does not decode: %v", v, err)
		}
		if !equal(v2, v) {
			t.Fatalf("decoded %+v, re-decoded %+v", v, v2)
		}
	})
}

func FuzzRoundTripMessage(f *testing.F) {
	m := goldenMessage()
	f.Add(m.Gid, m.Sender, m.ClientMsgID, m.SentAt, m.Body)
	f.Add("g", "u", "", int64(-1), []byte{})
	f.Add("", "u", "c", int64(0), []byte("x"))
	f.Add("g", "a b", "c", int64(0), []byte("x"))
	f.Add("g", "u", "c/d", int64(0), []byte("x"))
	f.Add("g", "u", "c", int64(0), []byte("\xff"))
	f.Fuzz(func(t *testing.T, gid, sender, cmid string, sentAt int64, body []byte) {
		m := Message{Gid: gid, Sender: sender, ClientMsgID: cmid, SentAt: sentAt, Body: body}
		got, err := DecodeMessage(AppendMessage(nil, &m))
		if checkMessage(m) != nil {
			// The encoder does not validate; the decoder must refuse.
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("invalid %+v decoded with error %v, want %v", m, err, ErrMalformed)
			}
			return
		}
		if err != nil {
			t.Fatalf("valid %+v: %v", m, err)
		}
		if !eqMessage(got, m) {
			t.Fatalf("decoded %+v, want %+v", got, m)
		}
	})
}

func checkMessage(m Message) error {
	if err := checkIDs(m.Gid, m.Sender); err != nil {
		return err
	}
	if err := checkOptionalID(m.ClientMsgID); err != nil {
		return err
	}
	if len(m.Body) > MaxBodyLen || !utf8.Valid(m.Body) {
		return fmt.Errorf("body of %d bytes, valid UTF-8 %t", len(m.Body), utf8.Valid(m.Body))
	}
	if m.MsgID != 0 {
		return fmt.Errorf("msgid %d set by the decoder", m.MsgID)
	}
	return nil
}

func checkCursor(gid, uid string, upto int64) error {
	if err := checkIDs(gid, uid); err != nil {
		return err
	}
	if upto < -1 || upto > MaxCursor {
		return fmt.Errorf("upto %d", upto)
	}
	return nil
}

func checkMember(m Member) error {
	if err := checkIDs(m.Gid, m.Uid); err != nil {
		return err
	}
	if m.Op != OpJoin && m.Op != OpLeave && m.Op != OpLeaving {
		return fmt.Errorf("op %v", m.Op)
	}
	if m.Pos < -1 || m.Pos > MaxCursor {
		return fmt.Errorf("pos %d", m.Pos)
	}
	if m.HasJoined && (m.Op == OpJoin || m.Joined < -1 || m.Joined > m.Pos) {
		return fmt.Errorf("%v at pos %d with joined %d", m.Op, m.Pos, m.Joined)
	}
	return checkOptionalID(m.By)
}

func checkIDs(ids ...string) error {
	for _, id := range ids {
		if err := ValidID(id); err != nil {
			return err
		}
	}
	return nil
}

func checkOptionalID(id string) error {
	if id == "" {
		return nil
	}
	return ValidID(id)
}

// edgeSeeds are records at and just past each limit the decoders enforce:
// id lengths and bytes, the optional ids, cursor and position bounds, a
// join position on the wrong op or out of range, bodies that are not
// UTF-8, and varints and lengths in a padded (non-minimal) form.
func edgeSeeds() [][]byte {
	longest, tooLong := strings.Repeat("i", MaxIDLen), strings.Repeat("i", MaxIDLen+1)
	var out [][]byte
	for _, m := range []Message{
		{Gid: longest, Sender: "u", SentAt: math.MinInt64},
		{Gid: tooLong, Sender: "u"},
		{Gid: "g", Sender: "u", ClientMsgID: "c/d"},
		{Gid: "g", Sender: "", Body: []byte("x")},
		{Gid: "g", Sender: "u", SentAt: math.MaxInt64, Body: []byte("\xed\xa0\x80")}, // a surrogate
	} {
		out = append(out, AppendMessage(nil, &m))
	}
	for _, a := range []Ack{{Gid: "g", Uid: "u", Upto: -1}, {Gid: "g", Uid: "u", Upto: -2}, {Gid: "g", Uid: longest, Upto: math.MaxInt64, At: -1}} {
		out = append(out, AppendAck(nil, &a))
	}
	for _, r := range []Receipt{{Gid: "g", Uid: "u", Upto: math.MinInt64}, {Gid: "g{", Uid: "u"}} {
		out = append(out, AppendReceipt(nil, &r))
	}
	for _, m := range []Member{
		{Gid: "g", Uid: "u", Op: OpJoin, Pos: -1},
		{Gid: "g", Uid: "u", Op: OpJoin, Pos: -2},
		{Gid: "g", Uid: "u", Op: OpJoin, Pos: MaxCursor},
		{Gid: "g", Uid: "u", Op: OpJoin, Pos: MaxCursor + 1},
		{Gid: "g", Uid: "u", Op: OpLeave, Pos: 5, HasJoined: true, Joined: 5},
		{Gid: "g", Uid: "u", Op: OpLeave, Pos: 5, HasJoined: true, Joined: 6},
		{Gid: "g", Uid: "u", Op: OpLeave, Pos: 5, HasJoined: true, Joined: -2},
		{Gid: "g", Uid: "u", Op: OpJoin, Pos: 5, HasJoined: true, Joined: 1},
		{Gid: "g", Uid: "u", Op: 3, Pos: 5},
		{Gid: "g", Uid: "u", Op: OpJoin, Pos: 5, By: "a b"},
	} {
		out = append(out, AppendMember(nil, &m))
	}
	return append(out,
		[]byte{Version, byte(KindAck), 1, 'g', 1, 'u', 0x80, 0x00, 0},              // upto 0, padded
		[]byte{Version, byte(KindAck), 0x81, 0x00, 'g', 1, 'u', 0, 0},              // gid length 1, padded
		[]byte{Version, byte(KindMessage), 1, 'g', 1, 'u', 0, 0, 0x80, 0x80, 0x40}, // body length 1 MiB, no body
	)
}

// IsKeyOf is the keys the producers write, compared without building them.
func FuzzIsKeyOf(f *testing.F) {
	f.Add([]byte("g1/alice"), "g1", "alice")
	f.Add([]byte("g1"), "g1", "")
	f.Add([]byte("g1/a/b"), "g1/a", "b")
	f.Add([]byte("g1x"), "g1", "x")
	f.Fuzz(func(t *testing.T, key []byte, gid, uid string) {
		want := string(key) == string(MemberKey(gid, uid))
		if uid == "" {
			want = string(key) == string(MessageKey(gid))
		}
		if got := IsKeyOf(key, gid, uid); got != want {
			t.Fatalf("IsKeyOf(%q, %q, %q) = %v; want %v", key, gid, uid, got, want)
		}
	})
}
