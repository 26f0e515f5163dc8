package schema

import (
	"bytes"
	"errors"
	"fmt"
)

// Version is the encoding version written by this build.
const Version = 1

// Limits that every decoder enforces on outside bytes.
const (
	MaxIDLen   = 128     // bytes in a gid, uid or client_msg_id
	MaxBodyLen = 1 << 20 // bytes in a message body; gateways set a lower limit

	// MaxCursor is the highest Upto of an ack or receipt, and the highest
	// Pos (so Joined) of a member event: 2^53, the highest integer a
	// double holds exactly. Cursors live in Redis sorted sets, whose
	// scores are doubles, and a join raises them to its Pos; a higher one
	// would be rounded and never reach what its record said (msgids are
	// offsets, far below).
	MaxCursor = 1 << 53
)

// Kind tells which event a record value holds (its second byte).
type Kind uint8

// The event kinds.
const (
	KindMessage Kind = 1
	KindAck     Kind = 2
	KindReceipt Kind = 3
	KindMember  Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindMessage:
		return "message"
	case KindAck:
		return "ack"
	case KindReceipt:
		return "receipt"
	case KindMember:
		return "member"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Errors returned by the decoders, wrapped with detail.
var (
	ErrUnknownVersion = errors.New("schema: unknown encoding version")
	ErrWrongKind      = errors.New("schema: wrong event kind")
	ErrMalformed      = errors.New("schema: malformed record")
	ErrInvalidID      = errors.New("schema: invalid id")
)

// Message is one group message: chat.messages, key gid.
type Message struct {
	Gid         string
	Sender      string
	ClientMsgID string // chosen by the sender's client; resends reuse it
	SentAt      int64  // unix milliseconds, set by the gateway
	Body        []byte

	// MsgID is the record's offset in its partition of chat.messages. It is
	// not encoded: the broker assigns it at append and consumers fill it in.
	MsgID int64
}

// Ack moves a member's delivery cursor: chat.acks, key gid/uid.
// Everything of the group up to and including Upto has been received.
type Ack struct {
	Gid  string
	Uid  string
	Upto int64 // msgid
	At   int64 // unix milliseconds
}

// Receipt moves a member's read cursor: chat.receipts, key gid/uid.
type Receipt struct {
	Gid  string
	Uid  string
	Upto int64 // msgid
	At   int64 // unix milliseconds
}

// MemberOp is what a Member event does.
type MemberOp uint8

// The membership operations.
const (
	OpJoin  MemberOp = 1
	OpLeave MemberOp = 2
	// OpLeaving announces a leave about to be written: the fan-out stops
	// pushing the group's messages after its Pos to the member (the leave's
	// Pos, read after it, is at least as far). It changes no membership;
	// projections skip it.
	OpLeaving MemberOp = 3
)

func (o MemberOp) String() string {
	switch o {
	case OpJoin:
		return "join"
	case OpLeave:
		return "leave"
	case OpLeaving:
		return "leaving"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Member changes a membership: chat.members, key gid/uid.
//
// Pos is the group's position when the change was made: the offset of the
// last record in the group's partition of chat.messages (-1 when empty). A
// joiner sees messages after Pos; a leaver sees nothing after Pos.
//
// A leave also carries the Pos of the join it ends (Joined), when its writer
// knew it (HasJoined). Compaction keeps only a member's newest record, so
// after it a leave is all that is left of a former member: without Joined a
// replay could not tell which messages they had been a member for. Leaves
// written before the field existed decode with HasJoined false.
type Member struct {
	Gid       string
	Uid       string
	Op        MemberOp
	Pos       int64
	At        int64  // unix milliseconds
	By        string // who made the change (an admin or the member), may be empty
	HasJoined bool   // only on a leave or a leaving
	Joined    int64  // when HasJoined: -1 <= Joined <= Pos
}

// ValidID reports whether s may be used as a gid, uid or client_msg_id:
// 1 to MaxIDLen bytes of ASCII letters, digits and "_.:@-". The set keeps
// ids safe inside Kafka keys ("gid/uid"), Redis hash tags ("{gid}") and
// ClickHouse literals.
func ValidID(s string) error {
	if len(s) == 0 || len(s) > MaxIDLen {
		return fmt.Errorf("%w: length %d, want 1 to %d bytes", ErrInvalidID, len(s), MaxIDLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !idByte[c] {
			return fmt.Errorf("%w: %q has byte %q at %d; use letters, digits and _.:@-", ErrInvalidID, s, c, i)
		}
	}
	return nil
}

// idByte tells the bytes ValidID allows: ASCII letters, digits and "_.:@-".
var idByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '.' || c == ':' || c == '@' || c == '-'
	}
	return t
}()

// MessageKey is the record key of a message: the gid.
func MessageKey(gid string) []byte { return []byte(gid) }

// MemberKey is the record key of ack, receipt and member events: "gid/uid".
func MemberKey(gid, uid string) []byte { return []byte(gid + "/" + uid) }

// IsKeyOf reports whether key is MessageKey(gid) (uid "") or
// MemberKey(gid, uid), without building either.
func IsKeyOf(key []byte, gid, uid string) bool {
	if uid == "" {
		return string(key) == gid
	}
	return len(key) == len(gid)+1+len(uid) && string(key[:len(gid)]) == gid &&
		key[len(gid)] == '/' && string(key[len(gid)+1:]) == uid
}

// GidOfKey returns the gid part of a record key (everything before the first
// "/"), which alone chooses the partition.
func GidOfKey(key []byte) []byte {
	if i := bytes.IndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}
