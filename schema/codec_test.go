package schema

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// Hand-made records, built without the encoder so the tests pin the layout.

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func hdr(v byte, k Kind) []byte { return []byte{v, byte(k)} }
func lp(s string) []byte        { return append(binary.AppendUvarint(nil, uint64(len(s))), s...) }
func zz(v int64) []byte         { return binary.AppendVarint(nil, v) }
func uv(v uint64) []byte        { return binary.AppendUvarint(nil, v) }

func rawMessage(gid, sender, cmid string, sentAt int64, body string) []byte {
	return cat(hdr(Version, KindMessage), lp(gid), lp(sender), lp(cmid), zz(sentAt), lp(body))
}

func rawCursor(k Kind, gid, uid string, upto, at int64) []byte {
	return cat(hdr(Version, k), lp(gid), lp(uid), zz(upto), zz(at))
}

func rawMember(gid, uid string, op byte, pos, at int64, by string) []byte {
	return cat(hdr(Version, KindMember), lp(gid), lp(uid), []byte{op}, zz(pos), zz(at), lp(by))
}

func eq[T comparable](a, b T) bool { return a == b }

func eqMessage(a, b Message) bool {
	return a.Gid == b.Gid && a.Sender == b.Sender && a.ClientMsgID == b.ClientMsgID &&
		a.SentAt == b.SentAt && bytes.Equal(a.Body, b.Body) && a.MsgID == b.MsgID
}

// decodeAs runs the decoder of kind k.
func decodeAs(k Kind, b []byte) error {
	var err error
	switch k {
	case KindMessage:
		_, err = DecodeMessage(b)
	case KindAck:
		_, err = DecodeAck(b)
	case KindReceipt:
		_, err = DecodeReceipt(b)
	case KindMember:
		_, err = DecodeMember(b)
	}
	return err
}

var kinds = []Kind{KindMessage, KindAck, KindReceipt, KindMember}

// goldenRecord is the encoding of the golden sample of kind k.
func goldenRecord(k Kind) []byte {
	switch k {
	case KindMessage:
		m := goldenMessage()
		return AppendMessage(nil, &m)
	case KindAck:
		a := goldenAck()
		return AppendAck(nil, &a)
	case KindReceipt:
		r := goldenReceipt()
		return AppendReceipt(nil, &r)
	case KindMember:
		m := goldenMember()
		return AppendMember(nil, &m)
	}
	panic(k)
}

// checkErr wants err to match want, and no other sentinel, and to say msg.
func checkErr(t *testing.T, err, want error, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", want)
	}
	for _, s := range []error{ErrUnknownVersion, ErrWrongKind, ErrMalformed, ErrInvalidID} {
		if errors.Is(err, s) != (s == want) {
			t.Fatalf("error %q: errors.Is(%v) = %t", err, s, !(s == want))
		}
	}
	if !strings.Contains(err.Error(), msg) {
		t.Fatalf("error %q does not say %q", err, msg)
	}
}

// checkRoundTrip encodes v after a prefix and decodes it back.
func checkRoundTrip[T any](t *testing.T, kind Kind, v T,
	appendT func([]byte, *T) []byte, decode func([]byte) (T, error), equal func(a, b T) bool) {
	t.Helper()
	prefix := []byte("dst")
	b := appendT(bytes.Clone(prefix), &v)
	if !bytes.HasPrefix(b, prefix) {
		t.Fatalf("append overwrote dst: % x", b)
	}
	b = b[len(prefix):]
	if k, err := KindOf(b); err != nil || k != kind {
		t.Fatalf("KindOf = %v, %v; want %v", k, err, kind)
	}
	got, err := decode(b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !equal(got, v) {
		t.Fatalf("decoded %+v\nwant %+v", got, v)
	}
}

var (
	maxID   = strings.Repeat("x", MaxIDLen)
	allID   = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:@-"
	longID  = strings.Repeat("x", MaxIDLen+1)
	badIDs  = []string{"a b", "g/u", "{g}", "é", "a\x00", "a\n", "a\x7f", "a,b"}
	badUTF8 = []string{"\xff", "ok\xc3", "\xed\xa0\x80", "\xc0\xaf"}
)

func TestMessageRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Message
	}{
		{"golden", goldenMessage()},
		{"no client_msg_id", Message{Gid: "g", Sender: "u", SentAt: 1, Body: []byte("hi")}},
		{"empty body", Message{Gid: "g", Sender: "u", ClientMsgID: "c"}},
		{"longest ids", Message{Gid: maxID, Sender: maxID, ClientMsgID: maxID, Body: []byte("x")}},
		{"every id byte", Message{Gid: allID, Sender: allID, ClientMsgID: allID}},
		{"control bytes in body", Message{Gid: "g", Sender: "u", Body: []byte("a\x00b\n\tc")}},
		{"largest body", Message{Gid: "g", Sender: "u", Body: bytes.Repeat([]byte("é"), MaxBodyLen/2)}},
		{"min sent_at", Message{Gid: "g", Sender: "u", SentAt: math.MinInt64}},
		{"max sent_at", Message{Gid: "g", Sender: "u", SentAt: math.MaxInt64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRoundTrip(t, KindMessage, tc.m, AppendMessage, DecodeMessage, eqMessage)
		})
	}
}

func TestMessageMsgIDNotEncoded(t *testing.T) {
	m := goldenMessage()
	m.MsgID = 42
	got, err := DecodeMessage(AppendMessage(nil, &m))
	if err != nil || got.MsgID != 0 {
		t.Fatalf("MsgID = %d, %v; want 0, nil", got.MsgID, err)
	}
}

func TestDecodeMessageCopiesBody(t *testing.T) {
	m := goldenMessage()
	b := AppendMessage(nil, &m)
	got, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if !bytes.Equal(got.Body, m.Body) {
		t.Fatalf("body changed with the record: %q", got.Body)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gid, uid string
		upto, at int64
	}{
		{"golden", "g:team-42", "bob", 1234567, 1767225601500},
		{"upto -1", "g", "u", -1, 0},
		{"upto 0", "g", "u", 0, 1},
		{"extremes", maxID, allID, MaxCursor, math.MinInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Ack{Gid: tc.gid, Uid: tc.uid, Upto: tc.upto, At: tc.at}
			checkRoundTrip(t, KindAck, a, AppendAck, DecodeAck, eq[Ack])
			r := Receipt(a)
			checkRoundTrip(t, KindReceipt, r, AppendReceipt, DecodeReceipt, eq[Receipt])
		})
	}
}

func TestMemberRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    Member
	}{
		{"golden", goldenMember()},
		{"join empty group", Member{Gid: "g", Uid: "u", Op: OpJoin, Pos: -1, At: 5}},
		{"no by", Member{Gid: "g", Uid: "u", Op: OpLeave, Pos: 0}},
		{"leave with join", goldenMemberJoined()},
		{"leave of a member who joined an empty group", Member{Gid: "g", Uid: "u", Op: OpLeave, Pos: 3, HasJoined: true, Joined: -1}},
		{"leave at the join", Member{Gid: "g", Uid: "u", Op: OpLeave, Pos: 7, HasJoined: true, Joined: 7}},
		{"leaving", Member{Gid: "g", Uid: "u", Op: OpLeaving, Pos: 9, At: 5, By: "admin", HasJoined: true, Joined: 2}},
		{"extremes", Member{Gid: maxID, Uid: allID, Op: OpJoin, Pos: MaxCursor, At: math.MinInt64, By: maxID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRoundTrip(t, KindMember, tc.m, AppendMember, DecodeMember, eq[Member])
		})
	}
}

type errCase struct {
	name string
	kind Kind // the decoder
	in   []byte
	want error
	msg  string // the error says this; it names the field
}

func TestDecodeErrors(t *testing.T) {
	overflow := bytes.Repeat([]byte{0xff}, 10) // a varint past 64 bits
	var cases []errCase
	add := func(name string, k Kind, in []byte, msg string) {
		cases = append(cases, errCase{k.String() + " " + name, k, in, ErrMalformed, msg})
	}

	for _, k := range kinds {
		rec := goldenRecord(k)
		for _, v := range []byte{0, 2, 255} {
			in := append([]byte{v}, rec[1:]...)
			cases = append(cases, errCase{fmt.Sprintf("%s version %d", k, v), k, in, ErrUnknownVersion,
				fmt.Sprintf("unknown encoding version: %d (", v)})
		}
		for _, other := range []Kind{0, KindMessage, KindAck, KindReceipt, KindMember, 5, 255} {
			if other == k {
				continue
			}
			in := append(hdr(Version, other), rec[2:]...)
			cases = append(cases, errCase{k.String() + " holding " + other.String(), k, in, ErrWrongKind,
				"record holds a " + other.String() + " event, want " + k.String()})
		}
		add("empty", k, nil, "0 bytes, too short for a header")
		add("one byte", k, []byte{Version}, "1 bytes, too short for a header")
		// A member record may end in a join position: the bytes after it
		// are the trailing ones.
		last := bytes.Clone(rec)
		if k == KindMember {
			m := goldenMemberJoined()
			last = AppendMember(nil, &m)
		}
		add("trailing zero", k, append(bytes.Clone(last), 0), k.String()+" event: 1 trailing bytes")
		add("trailing junk", k, append(bytes.Clone(last), "junk"...), "4 trailing bytes")
	}

	// Ids: too long, bad bytes, empty where required, bad length prefix.
	type idField struct {
		kind     Kind
		name     string
		required bool
		rec      func(id string) []byte
	}
	for _, f := range []idField{
		{KindMessage, "gid", true, func(id string) []byte { return rawMessage(id, "u", "c", 1, "b") }},
		{KindMessage, "sender", true, func(id string) []byte { return rawMessage("g", id, "c", 1, "b") }},
		{KindMessage, "client_msg_id", false, func(id string) []byte { return rawMessage("g", "u", id, 1, "b") }},
		{KindAck, "gid", true, func(id string) []byte { return rawCursor(KindAck, id, "u", 1, 1) }},
		{KindAck, "uid", true, func(id string) []byte { return rawCursor(KindAck, "g", id, 1, 1) }},
		{KindReceipt, "gid", true, func(id string) []byte { return rawCursor(KindReceipt, id, "u", 1, 1) }},
		{KindReceipt, "uid", true, func(id string) []byte { return rawCursor(KindReceipt, "g", id, 1, 1) }},
		{KindMember, "gid", true, func(id string) []byte { return rawMember(id, "u", 1, 1, 1, "b") }},
		{KindMember, "uid", true, func(id string) []byte { return rawMember("g", id, 1, 1, 1, "b") }},
		{KindMember, "by", false, func(id string) []byte { return rawMember("g", "u", 1, 1, 1, id) }},
	} {
		pre := f.name
		add(pre+" too long", f.kind, f.rec(longID), "event: "+f.name+" is 129 bytes, limit 128")
		for _, id := range badIDs {
			add(fmt.Sprintf("%s %q", pre, id), f.kind, f.rec(id), "event: "+f.name+": schema: invalid id: ")
		}
		if f.required {
			add(pre+" empty", f.kind, f.rec(""), "event: "+f.name+": schema: invalid id: length 0")
		}
		// Swap the id's length prefix for a huge one and for an overflowing one.
		rec := f.rec("IDX")
		i := bytes.Index(rec, []byte("IDX")) - 1
		add(pre+" huge length", f.kind, cat(rec[:i], uv(math.MaxUint64), rec[i+1:]),
			"event: "+f.name+" is 18446744073709551615 bytes, limit 128")
		add(pre+" overflowing length", f.kind, cat(rec[:i], overflow, rec[i+1:]),
			"event: "+f.name+" length is not a valid uvarint")
		add(pre+" padded length", f.kind, cat(rec[:i], []byte{0x83, 0x00}, rec[i+1:]),
			"event: "+f.name+" length is not a valid uvarint")
	}

	// Bodies.
	tooBig := strings.Repeat("x", MaxBodyLen+1)
	add("body too big", KindMessage, rawMessage("g", "u", "c", 1, tooBig), "event: body is 1048577 bytes, limit 1048576")
	add("body too big, cut", KindMessage, cat(hdr(Version, KindMessage), lp("g"), lp("u"), lp("c"), zz(1), uv(MaxBodyLen+1)),
		"event: body is 1048577 bytes, limit 1048576")
	for _, s := range badUTF8 {
		add(fmt.Sprintf("body %q", s), KindMessage, rawMessage("g", "u", "c", 1, s), "event: body is not valid UTF-8")
	}

	add("body padded length", KindMessage, cat(hdr(Version, KindMessage), lp("g"), lp("u"), lp("c"), zz(1), []byte{0x81, 0x00}, []byte("b")),
		"event: body length is not a valid uvarint")

	// Integers. A padded varint (0x82 0x00 for 1) is refused: each value
	// has one encoding.
	padded := []byte{0x82, 0x00}
	add("sent_at overflow", KindMessage, cat(hdr(Version, KindMessage), lp("g"), lp("u"), lp("c"), overflow, lp("b")),
		"event: sent_at is not a valid varint")
	add("sent_at padded", KindMessage, cat(hdr(Version, KindMessage), lp("g"), lp("u"), lp("c"), padded, lp("b")),
		"event: sent_at is not a valid varint")
	add("sent_at padded to 10 bytes", KindMessage, cat(hdr(Version, KindMessage), lp("g"), lp("u"), lp("c"),
		[]byte{0x82, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, lp("b")),
		"event: sent_at is not a valid varint")
	for _, k := range []Kind{KindAck, KindReceipt} {
		add("upto -2", k, rawCursor(k, "g", "u", -2, 1), "event: upto -2 is below -1")
		add("upto min", k, rawCursor(k, "g", "u", math.MinInt64, 1), "event: upto -9223372036854775808 is below -1")
		add("upto above 2^53", k, rawCursor(k, "g", "u", MaxCursor+1, 1), "event: upto 9007199254740993 is above 2^53")
		add("upto max", k, rawCursor(k, "g", "u", math.MaxInt64, 1), "event: upto 9223372036854775807 is above 2^53")
		add("upto overflow", k, cat(hdr(Version, k), lp("g"), lp("u"), overflow, zz(1)), "event: upto is not a valid varint")
		add("at overflow", k, cat(hdr(Version, k), lp("g"), lp("u"), zz(1), overflow), "event: at is not a valid varint")
		add("upto padded", k, cat(hdr(Version, k), lp("g"), lp("u"), padded, zz(1)), "event: upto is not a valid varint")
		add("at padded", k, cat(hdr(Version, k), lp("g"), lp("u"), zz(1), padded), "event: at is not a valid varint")
	}

	// Members.
	for _, op := range []byte{0, 4, 255} {
		add("unknown op", KindMember, rawMember("g", "u", op, 1, 1, ""), fmt.Sprintf("event: unknown member op %d", op))
	}
	add("pos padded", KindMember, cat(hdr(Version, KindMember), lp("g"), lp("u"), []byte{byte(OpJoin)}, padded, zz(1), lp("")),
		"event: pos is not a valid varint")
	add("at padded", KindMember, cat(hdr(Version, KindMember), lp("g"), lp("u"), []byte{byte(OpJoin)}, zz(1), padded, lp("")),
		"event: at is not a valid varint")
	add("pos -2", KindMember, rawMember("g", "u", byte(OpJoin), -2, 1, ""), "event: pos -2 is below -1")
	add("pos above 2^53", KindMember, rawMember("g", "u", byte(OpJoin), MaxCursor+1, 1, ""), "event: pos 9007199254740993 is above 2^53")
	add("pos max", KindMember, rawMember("g", "u", byte(OpLeave), math.MaxInt64, 1, ""), "event: pos 9223372036854775807 is above 2^53")
	add("joined above 2^53", KindMember, cat(rawMember("g", "u", byte(OpLeave), MaxCursor+1, 1, ""), zz(MaxCursor+1)),
		"event: pos 9007199254740993 is above 2^53")
	add("pos min", KindMember, rawMember("g", "u", byte(OpLeave), math.MinInt64, 1, ""), "event: pos -9223372036854775808 is below -1")
	add("join with a join position", KindMember, cat(rawMember("g", "u", byte(OpJoin), 5, 1, ""), zz(3)),
		"event: a join carries a join position")
	add("joined past pos", KindMember, cat(rawMember("g", "u", byte(OpLeave), 5, 1, ""), zz(6)),
		"event: joined 6 is outside -1 to pos 5")
	add("joined -2", KindMember, cat(rawMember("g", "u", byte(OpLeave), 5, 1, ""), zz(-2)),
		"event: joined -2 is outside -1 to pos 5")
	add("joined padded", KindMember, cat(rawMember("g", "u", byte(OpLeave), 5, 1, ""), padded),
		"event: joined is not a valid varint")
	add("bytes after joined", KindMember, cat(rawMember("g", "u", byte(OpLeave), 5, 1, ""), zz(3), []byte{0}),
		"event: 1 trailing bytes")

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, decodeAs(tc.kind, tc.in), tc.want, tc.msg)
		})
	}
}

type field struct {
	name string
	b    []byte
}

// TestDecodeTruncated cuts each golden record at every byte and wants the
// error to name the field that was cut. It also pins the field layout.
func TestDecodeTruncated(t *testing.T) {
	m, a, r, mb := goldenMessage(), goldenAck(), goldenReceipt(), goldenMember()
	for _, tc := range []struct {
		kind   Kind
		fields []field
	}{
		{KindMessage, []field{{"header", hdr(Version, KindMessage)}, {"gid", lp(m.Gid)}, {"sender", lp(m.Sender)},
			{"client_msg_id", lp(m.ClientMsgID)}, {"sent_at", zz(m.SentAt)}, {"body", lp(string(m.Body))}}},
		{KindAck, []field{{"header", hdr(Version, KindAck)}, {"gid", lp(a.Gid)}, {"uid", lp(a.Uid)},
			{"upto", zz(a.Upto)}, {"at", zz(a.At)}}},
		{KindReceipt, []field{{"header", hdr(Version, KindReceipt)}, {"gid", lp(r.Gid)}, {"uid", lp(r.Uid)},
			{"upto", zz(r.Upto)}, {"at", zz(r.At)}}},
		{KindMember, []field{{"header", hdr(Version, KindMember)}, {"gid", lp(mb.Gid)}, {"uid", lp(mb.Uid)},
			{"op", []byte{byte(mb.Op)}}, {"pos", zz(mb.Pos)}, {"at", zz(mb.At)}, {"by", lp(mb.By)}}},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			var full []byte
			for _, f := range tc.fields {
				full = append(full, f.b...)
			}
			if rec := goldenRecord(tc.kind); !bytes.Equal(full, rec) {
				t.Fatalf("layout changed:\nfields % x\nrecord % x", full, rec)
			}
			start := 0
			for _, f := range tc.fields {
				for p := start; p < start+len(f.b); p++ {
					err := decodeAs(tc.kind, full[:p:p])
					msg := tc.kind.String() + " event: " + f.name
					if f.name == "header" {
						msg = "too short for a header"
					} else if err != nil && !strings.Contains(err.Error(), msg+" ") {
						msg += ":"
					}
					checkErr(t, err, ErrMalformed, msg)
				}
				start += len(f.b)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	for _, k := range kinds {
		if got, err := KindOf(goldenRecord(k)); err != nil || got != k {
			t.Errorf("KindOf(%v record) = %v, %v", k, got, err)
		}
	}
	_, err := KindOf([]byte{2, 1})
	checkErr(t, err, ErrUnknownVersion, "2 (this build reads version 1)")
	_, err = KindOf([]byte{1})
	checkErr(t, err, ErrMalformed, "too short")
}
