package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/groupchat/chatd/schema"
)

// Limits on client frames.
const (
	MaxIDLen    = 64   // bytes in a request id
	MaxTokenLen = 4096 // bytes in a token
	MaxLimit    = 1000 // messages in a pull page

	// MaxMembers is the most members a group has: what a who-read answer
	// lists at most (clients refuse a longer one), and the limit every way
	// of adding members (the gateway, chatctl) keeps.
	MaxMembers = 10000
)

// Decode parses and validates one client frame. maxBody is the largest send
// body in bytes the server accepts.
func Decode(b []byte, maxBody int) (Request, error) {
	var r Request
	if !utf8.Valid(b) {
		return r, Errorf(CodeBadFrame, "the frame is not valid UTF-8; send JSON text frames")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	// A frame that does not decode is answered with its id when the id
	// can still be read: the client learns which request failed.
	if err := d.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return Request{ID: readableID(b)}, Errorf(CodeBadFrame, "%q must be %s, not a JSON %s", te.Field, fieldWant(te.Field, te.Type), te.Value)
		case errors.As(err, &te):
			return Request{}, Errorf(CodeBadFrame, `a request is one JSON object, e.g. {"op":"sync"} (over HTTP, the operation's fields), not a JSON %s`, te.Value)
		}
		why := err.Error()
		if errors.Is(err, io.ErrUnexpectedEOF) {
			why = `the JSON ends before the object does (a closing } or " is missing)`
		}
		return Request{ID: readableID(b)}, Errorf(CodeBadFrame, `a request is one JSON object, e.g. {"op":"sync"} (over HTTP, the operation's fields): %s`, why)
	}
	// More would let a stray "}" or "]" after the object pass: only
	// whitespace may follow it.
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return Request{ID: readableID(b)}, Errorf(CodeBadFrame, "one JSON object per frame, and nothing after it")
	}
	if len(r.ID) > MaxIDLen {
		return Request{}, Errorf(CodeInvalid, "id is %d bytes; at most %d", len(r.ID), MaxIDLen) // not echoed
	}
	return r, r.validate(maxBody)
}

// readableID is the id of a frame that did not decode, read as far as the
// frame is JSON: the string of a top-level "id" (any case, as Decode reads
// it; the last one, as there) that comes before what is wrong. An id past
// MaxIDLen, or none, is "": it is not echoed.
func readableID(b []byte) string {
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	var id string
	for d.More() {
		key, err := d.Token()
		if err != nil {
			break
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			break
		}
		var s string
		if k, _ := key.(string); strings.EqualFold(k, "id") && json.Unmarshal(v, &s) == nil {
			id = s
		}
	}
	if len(id) > MaxIDLen {
		return ""
	}
	return id
}

// TokenTooLong is the refusal of a token of n bytes, past MaxTokenLen,
// wherever it is given.
func TokenTooLong(n int) *Error {
	return Errorf(CodeBadToken, "the token is %d bytes, past the %d a token may have; issue tokens with fewer claims", n, MaxTokenLen)
}

func (r *Request) validate(maxBody int) error {
	switch r.Op {
	case OpAuth:
		// The codes a token gets wherever it is given (PROTOCOL.md).
		if r.Token == "" {
			return Errorf(CodeUnauthenticated, `auth needs a token: {"op":"auth","token":"<JWT>"}, a client token from your login service (chatd dev: POST /v1/dev/token)`)
		}
		if len(r.Token) > MaxTokenLen {
			return TokenTooLong(len(r.Token))
		}
	case OpSend:
		if err := checkGid(r.Op, r.Gid); err != nil {
			return err
		}
		if err := schema.ValidID(r.Cmid); err != nil {
			return Errorf(CodeInvalid, "send needs a cmid (your id for the message, reused when you resend): %v", err)
		}
		if r.Body == "" {
			return Errorf(CodeInvalid, "send needs a non-empty body")
		}
		if len(r.Body) > maxBody {
			return Errorf(CodeBodyTooLarge, "the body is %d bytes; the limit is %d: split it into messages of at most %d bytes", len(r.Body), maxBody, maxBody)
		}
	case OpAck, OpRead:
		if err := checkGid(r.Op, r.Gid); err != nil {
			return err
		}
		if r.Upto == nil || *r.Upto < -1 {
			return Errorf(CodeInvalid, "%s needs upto: the msgid up to which you have the group's messages", r.Op)
		}
	case OpPull:
		if err := checkGid(r.Op, r.Gid); err != nil {
			return err
		}
		if r.After != nil && *r.After < -1 {
			return Errorf(CodeInvalid, "after must be a msgid or -1")
		}
		if r.Before != nil && *r.Before < 0 {
			return Errorf(CodeInvalid, "before must be a msgid (the oldest you hold; the page ends right below it)")
		}
		if r.Limit < 0 || r.Limit > MaxLimit {
			return Errorf(CodeInvalid, "limit must be 1 to %d (0 for the default)", MaxLimit)
		}
	case OpSync:
	case OpReadCounts:
		if err := checkGid(r.Op, r.Gid); err != nil {
			return err
		}
		if len(r.MsgIDs) == 0 || len(r.MsgIDs) > MaxMsgIDs {
			return Errorf(CodeInvalid, "read_counts needs 1 to %d msgids", MaxMsgIDs)
		}
	case OpWhoRead:
		if err := checkGid(r.Op, r.Gid); err != nil {
			return err
		}
		if r.MsgID == nil || *r.MsgID < 0 {
			return Errorf(CodeInvalid, "who_read needs the msgid of one message")
		}
	case OpCursors:
		return r.validateCursors()
	case "":
		return Errorf(CodeInvalid, `the frame has no "op": set it to one of %s, e.g. {"op":"sync"}`, opList)
	default:
		return Errorf(CodeUnknownOp, "unknown op %q; this server speaks %s", r.Op, opList)
	}
	return nil
}

// opList names the ops a client sends.
const opList = "auth, send, ack, read, pull, sync, read_counts, who_read and cursors"

// validateCursors checks a cursors frame: 1 to MaxCursors entries, each
// as an ack or read frame's gid and upto, and a group at most once in
// each list (its answer names a refused entry by list and gid).
func (r *Request) validateCursors() error {
	n := len(r.Acks) + len(r.Reads)
	if n == 0 || n > MaxCursors {
		return Errorf(CodeInvalid, `cursors needs 1 to %d entries, acks and reads together, not %d: {"op":"cursors","acks":[{"gid":"g1","upto":42}],"reads":[...]}; send more in another frame`, MaxCursors, n)
	}
	seen := make(map[string]bool, n)
	for _, l := range []struct {
		op   string
		list []Cursor
	}{{OpAck, r.Acks}, {OpRead, r.Reads}} {
		clear(seen)
		for i, c := range l.list {
			if err := checkGid(l.op, c.Gid); err != nil {
				return Errorf(CodeInvalid, "%ss[%d]: %s", l.op, i, err.(*Error).Message)
			}
			if c.Upto == nil || *c.Upto < -1 {
				return Errorf(CodeInvalid, "%ss[%d] (%s) needs upto: the msgid up to which you have the group's messages", l.op, i, c.Gid)
			}
			if seen[c.Gid] {
				return Errorf(CodeInvalid, "%ss names %s twice; name a group once in each list, up to the newest msgid", l.op, c.Gid)
			}
			seen[c.Gid] = true
		}
	}
	return nil
}

// checkGid refuses the gid of an op: a missing one was answered "gid:
// schema: invalid id: length 0, want 1 to 128 bytes".
func checkGid(op, gid string) error {
	if gid == "" {
		return Errorf(CodeInvalid, `%s needs a "gid": the id of the group, e.g. {"op":%q,"gid":"team",...}`, op, op)
	}
	if err := schema.ValidID(gid); err != nil {
		return Errorf(CodeInvalid, "gid: %v", err)
	}
	return nil
}

// fieldWant names what a field of Request must hold; t is the type the
// decoder wanted where it failed (an element's, in a list).
func fieldWant(field string, t reflect.Type) string {
	rt := reflect.TypeFor[Request]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == field && f.Type.Kind() == reflect.Slice {
			return "a list of " + strings.TrimPrefix(strings.TrimPrefix(kindWord(f.Type.Elem().Kind()), "a "), "an ") + "s"
		}
	}
	return kindWord(t.Kind())
}

// kindWord names a kind of JSON value the way a person would.
func kindWord(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		return "a whole number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Bool:
		return "true or false"
	}
	return "another kind of value"
}
