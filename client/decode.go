package client

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/groupchat/chatd/protocol"
)

// decodeFrame decodes a server frame. Pushes and pages, which carry every
// message a client receives, take a hand-written path that does what
// encoding/json does for them at a fraction of the cost; any frame it does
// not fully understand (another op's fields, null, duplicate keys, escapes
// it leaves to the standard library) goes to encoding/json, which also
// reports the errors. The fuzz test holds the two to the same result.
func decodeFrame(b []byte, f *frame) error {
	var fast frame
	d := scanner{b: b}
	if d.frame(&fast) && d.end() {
		*f = fast
		return nil
	}
	return json.Unmarshal(b, f)
}

// Bits of the keys seen in a frame, and in a message.
const (
	fOp uint32 = 1 << iota
	fID
	fUid
	fGid
	fCmid
	fCode
	fMessage
	fMsgID
	fAfter
	fHead
	fMore
	fMsgs
)

// op reads an op, sharing the constant's string for the common ones.
func (d *scanner) op() (string, bool) {
	s, ok := d.strLike(protocol.OpPush)
	switch s {
	case protocol.OpPage:
		s = protocol.OpPage
	case protocol.OpAccepted:
		s = protocol.OpAccepted
	case protocol.OpOK:
		s = protocol.OpOK
	}
	return s, ok
}

// frame reads the fields of push, page, accepted, ok, authed and error
// frames; any other field sends the frame to encoding/json.
func (d *scanner) frame(f *frame) bool {
	var seen uint32
	for first := true; ; first = false {
		key, done, ok := d.key(first)
		switch {
		case !ok:
			return false
		case done:
			return true
		}
		switch string(key) {
		case "op":
			ok = once(&seen, fOp)
			if ok {
				f.Op, ok = d.op()
			}
		case "id":
			ok = once(&seen, fID) && d.strInto(&f.ID)
		case "uid":
			ok = once(&seen, fUid) && d.strInto(&f.Uid)
		case "gid":
			ok = once(&seen, fGid) && d.strInto(&f.Gid)
		case "cmid":
			ok = once(&seen, fCmid) && d.strInto(&f.Cmid)
		case "code":
			var s string
			ok = once(&seen, fCode) && d.strInto(&s)
			f.Code = protocol.Code(s)
		case "message":
			ok = once(&seen, fMessage) && d.strInto(&f.Message)
		case "msgid":
			ok = once(&seen, fMsgID) && d.intInto(&f.MsgID)
		case "after":
			ok = once(&seen, fAfter) && d.intInto(&f.After)
		case "head":
			ok = once(&seen, fHead) && d.intInto(&f.Head)
		case "more":
			ok = once(&seen, fMore)
			if ok {
				f.More, ok = d.bool()
			}
		case "msgs":
			ok = once(&seen, fMsgs) && d.messages(&f.Msgs)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
}

// msgList is a frame's messages. A frame holds at most a page of them
// (protocol.MaxLimit; a push holds fewer): a frame of more is refused
// before they are decoded, as a frame of maxFrame bytes of {} would be
// millions of them and take gigabytes.
type msgList []protocol.Message

var errTooManyMsgs = fmt.Errorf("client: a frame of more than %d messages: a server fault", protocol.MaxLimit)

// UnmarshalJSON decodes the messages one by one, up to protocol.MaxLimit.
func (l *msgList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*l = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return fmt.Errorf("client: msgs: want an array, got %.20s", b)
	}
	msgs := msgList{}
	for dec.More() {
		if len(msgs) == protocol.MaxLimit {
			return errTooManyMsgs
		}
		var m protocol.Message
		if err := dec.Decode(&m); err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	*l = msgs
	return nil
}

// The other lists of a server frame, each bounded by what a server sends:
// past its bound a list is refused before the rest of it is decoded, as 32
// MiB of {} would be 11 million entries and take gigabytes.
const (
	// maxGroups bounds a sync answer's groups. The server sets no bound on
	// a user's groups, and sends a sync answer whatever its size: the
	// bound is what a frame the client reads (maxFrame) holds of the
	// shortest group a gateway writes, about 486,000, so that no user of a
	// real server is refused a sync. A hostile server's frame of {}, 24
	// times denser, is refused; a sync of the most groups a frame holds
	// (460,000 of distinct gids) held 221 MiB, until a later sync no
	// longer names them (forgetLocked).
	maxGroups = maxFrame / (len(shortestGroup) + len(","))
	// shortestGroup is the shortest group of a sync answer a gateway
	// writes (encoding/json, every field but left).
	shortestGroup = `{"gid":"a","head":0,"ack":0,"read":0,"unread":0,"unread_exact":true}`
	// maxCounts bounds the counts of a counts answer (one per msgid asked,
	// at most protocol.MaxMsgIDs) and of a receipts push (a sender's
	// messages among the newest of the group, 200 by default).
	maxCounts = 1000
	// maxReaders bounds each of a readers answer's read and unread
	// members: a group has at most protocol.MaxMembers.
	maxReaders = protocol.MaxMembers
)

type (
	groupList []protocol.GroupState
	countList []protocol.ReadCount
	idList    []int64
	uidList   []string
)

func (l *groupList) UnmarshalJSON(b []byte) (err error) {
	*l, err = decodeList[protocol.GroupState](b, maxGroups, "groups")
	return err
}

func (l *countList) UnmarshalJSON(b []byte) (err error) {
	*l, err = decodeList[protocol.ReadCount](b, maxCounts, "read counts")
	return err
}

func (l *idList) UnmarshalJSON(b []byte) (err error) {
	*l, err = decodeList[int64](b, protocol.MaxMsgIDs, "unknown msgids")
	return err
}

func (l *uidList) UnmarshalJSON(b []byte) (err error) {
	*l, err = decodeList[string](b, maxReaders, "members in read or unread")
	return err
}

// decodeList decodes a JSON array (or null) of at most most values of T;
// what names them in the error. b is valid JSON (encoding/json checks a
// frame before it decodes it): its values are counted first, without
// decoding them.
func decodeList[T any](b []byte, most int, what string) ([]T, error) {
	if n := arrayLen(b); n > most {
		return nil, fmt.Errorf("client: a server frame of %d %s, more than the %d a server sends: a server fault", n, what, most)
	}
	var out []T
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// arrayLen counts the values of b, a valid JSON array; 0 for anything else.
func arrayLen(b []byte) int {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' || len(bytes.TrimSpace(b[1:len(b)-1])) == 0 {
		return 0
	}
	n, depth, inStr, esc := 1, 0, false, false
	for _, c := range b {
		switch {
		case esc:
			esc = false
		case inStr:
			esc, inStr = c == '\\', c != '"'
		case c == '"':
			inStr = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			n++
		}
	}
	return n
}

// messages reads an array of messages; [] gives an empty, non-nil slice as
// encoding/json does. More than protocol.MaxLimit go to encoding/json,
// which refuses them.
func (d *scanner) messages(out *msgList) bool {
	if !d.lit('[') {
		return false
	}
	// A page holds up to 1,000 messages: size the slice once, from the
	// msgid keys ahead (a body may hold the same text: it only costs room).
	msgs := make(msgList, 0, min(protocol.MaxLimit, max(1, bytes.Count(d.b[d.i:], []byte(`"msgid":`)))))
	if d.lit(']') {
		*out = msgs
		return true
	}
	var last *protocol.Message
	for {
		if len(msgs) == protocol.MaxLimit {
			return false
		}
		msgs = append(msgs, protocol.Message{})
		m := &msgs[len(msgs)-1]
		if last != nil { // strings like the previous message's are shared
			m.Gid, m.Sender = last.Gid, last.Sender
		}
		if !d.message(m) {
			return false
		}
		last = m
		if d.lit(',') {
			continue
		}
		if !d.lit(']') {
			return false
		}
		*out = msgs
		return true
	}
}

// Bits of the keys seen in a message.
const (
	mGid uint32 = 1 << iota
	mMsgID
	mPrev
	mSender
	mSentAt
	mCmid
	mBody
)

// message reads one message into m; m.Gid and m.Sender hold the previous
// message's, to be shared when equal, and are replaced or cleared.
func (d *scanner) message(m *protocol.Message) bool {
	likeGid, likeSender := m.Gid, m.Sender
	m.Gid, m.Sender = "", ""
	var seen uint32
	for first := true; ; first = false {
		key, done, ok := d.key(first)
		switch {
		case !ok:
			return false
		case done:
			return true
		}
		switch string(key) {
		case "gid":
			ok = once(&seen, mGid)
			if ok {
				m.Gid, ok = d.strLike(likeGid)
			}
		case "msgid":
			ok = once(&seen, mMsgID) && d.intInto(&m.MsgID)
		case "prev":
			ok = once(&seen, mPrev) && d.peek() != 'n' // null: left to encoding/json
			if ok {
				var v int64
				v, ok = d.int()
				m.Prev = &v
			}
		case "sender":
			ok = once(&seen, mSender)
			if ok {
				m.Sender, ok = d.strLike(likeSender)
			}
		case "sent_at":
			ok = once(&seen, mSentAt) && d.intInto(&m.SentAt)
		case "cmid":
			ok = once(&seen, mCmid) && d.strInto(&m.Cmid)
		case "body":
			ok = once(&seen, mBody) && d.strInto(&m.Body)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
}
