package schema

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// AppendMessage appends the encoding of m to dst. MsgID is not encoded.
func AppendMessage(dst []byte, m *Message) []byte {
	dst = append(dst, Version, byte(KindMessage))
	dst = appendString(dst, m.Gid)
	dst = appendString(dst, m.Sender)
	dst = appendString(dst, m.ClientMsgID)
	dst = binary.AppendVarint(dst, m.SentAt)
	return appendBytes(dst, m.Body)
}

// DecodeMessage decodes a chat.messages record value. The body is copied.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	d, err := newDecoder(b, KindMessage)
	if err != nil {
		return m, err
	}
	m.Gid = d.id("gid")
	m.Sender = d.id("sender")
	m.ClientMsgID = d.optionalID("client_msg_id")
	m.SentAt = d.varint("sent_at")
	m.Body = d.bytes("body", MaxBodyLen)
	if !utf8.Valid(m.Body) && d.err == nil {
		d.fail("body is not valid UTF-8")
	}
	return m, d.finish()
}

// AppendAck appends the encoding of a to dst.
func AppendAck(dst []byte, a *Ack) []byte {
	return appendCursor(dst, KindAck, a.Gid, a.Uid, a.Upto, a.At)
}

// DecodeAck decodes a chat.acks record value.
func DecodeAck(b []byte) (Ack, error) {
	var a Ack
	d, err := newDecoder(b, KindAck)
	if err != nil {
		return a, err
	}
	a.Gid, a.Uid, a.Upto, a.At = d.cursor()
	return a, d.finish()
}

// AppendReceipt appends the encoding of r to dst.
func AppendReceipt(dst []byte, r *Receipt) []byte {
	return appendCursor(dst, KindReceipt, r.Gid, r.Uid, r.Upto, r.At)
}

// DecodeReceipt decodes a chat.receipts record value.
func DecodeReceipt(b []byte) (Receipt, error) {
	var r Receipt
	d, err := newDecoder(b, KindReceipt)
	if err != nil {
		return r, err
	}
	r.Gid, r.Uid, r.Upto, r.At = d.cursor()
	return r, d.finish()
}

// AppendMember appends the encoding of m to dst.
func AppendMember(dst []byte, m *Member) []byte {
	dst = append(dst, Version, byte(KindMember))
	dst = appendString(dst, m.Gid)
	dst = appendString(dst, m.Uid)
	dst = append(dst, byte(m.Op))
	dst = binary.AppendVarint(dst, m.Pos)
	dst = binary.AppendVarint(dst, m.At)
	dst = appendString(dst, m.By)
	if m.HasJoined {
		dst = binary.AppendVarint(dst, m.Joined)
	}
	return dst
}

// DecodeMember decodes a chat.members record value.
func DecodeMember(b []byte) (Member, error) {
	var m Member
	d, err := newDecoder(b, KindMember)
	if err != nil {
		return m, err
	}
	m.Gid = d.id("gid")
	m.Uid = d.id("uid")
	m.Op = MemberOp(d.byte("op"))
	if d.err == nil && m.Op != OpJoin && m.Op != OpLeave && m.Op != OpLeaving {
		d.fail(fmt.Sprintf("unknown member op %d", uint8(m.Op)))
	}
	m.Pos = d.position("pos") // a join raises the member's cursors to it; Joined is at most Pos
	m.At = d.varint("at")
	m.By = d.optionalID("by")
	if d.err == nil && len(d.b) > 0 {
		m.HasJoined, m.Joined = true, d.varint("joined")
		switch {
		case d.err != nil:
		case m.Op == OpJoin:
			d.fail(fmt.Sprintf("a %s carries a join position", m.Op))
		case m.Joined < -1 || m.Joined > m.Pos:
			d.fail(fmt.Sprintf("joined %d is outside -1 to pos %d", m.Joined, m.Pos))
		}
	}
	return m, d.finish()
}

// KindOf returns the kind of an encoded record without decoding it.
func KindOf(b []byte) (Kind, error) {
	if len(b) < 2 {
		return 0, fmt.Errorf("%w: %d bytes, too short for a header", ErrMalformed, len(b))
	}
	if b[0] != Version {
		return 0, fmt.Errorf("%w: %d (this build reads version %d)", ErrUnknownVersion, b[0], Version)
	}
	return Kind(b[1]), nil
}

func appendCursor(dst []byte, k Kind, gid, uid string, upto, at int64) []byte {
	dst = append(dst, Version, byte(k))
	dst = appendString(dst, gid)
	dst = appendString(dst, uid)
	dst = binary.AppendVarint(dst, upto)
	return binary.AppendVarint(dst, at)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decoder reads fields in order; the first failure sticks and later reads
// return zero values, so callers check d.finish() once.
type decoder struct {
	b    []byte
	kind Kind
	err  error
}

// newDecoder returns the decoder by value: callers keep it on their stack.
func newDecoder(b []byte, want Kind) (decoder, error) {
	k, err := KindOf(b)
	if err != nil {
		return decoder{}, err
	}
	if k != want {
		return decoder{}, fmt.Errorf("%w: record holds a %s event, want %s", ErrWrongKind, k, want)
	}
	return decoder{b: b[2:], kind: want}, nil
}

func (d *decoder) fail(reason string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s event: %s", ErrMalformed, d.kind, reason)
	}
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	return d.err
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail(field + " is missing")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) varint(field string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || !minimal(d.b, n) {
		d.fail(field + " is not a valid varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// minimal reports whether the n-byte varint at the start of b has no
// padding (a longer form ends in 0x00). The encoder writes only the shortest
// form, so every value has one encoding.
func minimal(b []byte, n int) bool { return n == 1 || b[n-1] != 0 }

func (d *decoder) raw(field string, max int) []byte {
	if d.err != nil {
		return nil
	}
	l, n := binary.Uvarint(d.b)
	if n <= 0 || !minimal(d.b, n) {
		d.fail(field + " length is not a valid uvarint")
		return nil
	}
	if l > uint64(max) {
		d.fail(fmt.Sprintf("%s is %d bytes, limit %d", field, l, max))
		return nil
	}
	if uint64(len(d.b)-n) < l {
		d.fail(fmt.Sprintf("%s is cut short: %d of %d bytes", field, len(d.b)-n, l))
		return nil
	}
	v := d.b[n : n+int(l)]
	d.b = d.b[n+int(l):]
	return v
}

func (d *decoder) bytes(field string, max int) []byte {
	v := d.raw(field, max)
	if v == nil {
		return nil
	}
	return append([]byte(nil), v...)
}

func (d *decoder) id(field string) string {
	v := d.raw(field, MaxIDLen)
	if d.err != nil {
		return ""
	}
	return d.checkID(field, string(v))
}

// optionalID is an id that may be empty.
func (d *decoder) optionalID(field string) string {
	v := d.raw(field, MaxIDLen)
	if d.err != nil || len(v) == 0 {
		return ""
	}
	return d.checkID(field, string(v))
}

func (d *decoder) checkID(field, s string) string {
	if err := ValidID(s); err != nil {
		d.fail(fmt.Sprintf("%s: %v", field, err))
		return ""
	}
	return s
}

func (d *decoder) cursor() (gid, uid string, upto, at int64) {
	gid = d.id("gid")
	uid = d.id("uid")
	upto = d.position("upto")
	at = d.varint("at")
	return gid, uid, upto, at
}

// position reads a msgid a cursor may hold: -1 (none) up to MaxCursor.
func (d *decoder) position(field string) int64 {
	v := d.varint(field)
	switch {
	case d.err != nil:
	case v < -1:
		d.fail(fmt.Sprintf("%s %d is below -1", field, v))
	case v > MaxCursor:
		d.fail(fmt.Sprintf("%s %d is above 2^53", field, v))
	}
	return v
}
