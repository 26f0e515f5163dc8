package protocol

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/groupchat/chatd/schema"
)

func TestDecodeValidatesEachOp(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Code
	}{
		{`{"op":"auth","token":"t"}`, ""},
		{`{"op":"auth"}`, CodeUnauthenticated},
		{`{"op":"auth","token":"` + strings.Repeat("t", MaxTokenLen+1) + `"}`, CodeBadToken},
		{`{"op":"send","gid":"g","cmid":"c","body":"b"}`, ""},
		{`{"op":"send","gid":"g","body":"b"}`, CodeInvalid},
		{`{"op":"send","gid":"g","cmid":"c","body":""}`, CodeInvalid},
		{`{"op":"send","gid":"g","cmid":"c","body":"` + strings.Repeat("x", 11) + `"}`, CodeBodyTooLarge},
		{`{"op":"ack","gid":"g","upto":3}`, ""},
		{`{"op":"ack","gid":"g"}`, CodeInvalid},
		{`{"op":"read","gid":"g","upto":-2}`, CodeInvalid},
		{`{"op":"pull","gid":"g","after":5,"limit":1000}`, ""},
		{`{"op":"pull","gid":"g","limit":1001}`, CodeInvalid},
		{`{"op":"pull","gid":"{g}"}`, CodeInvalid},
		{`{"op":"pull","gid":"g","before":42,"limit":50}`, ""},
		{`{"op":"pull","gid":"g","before":-1}`, CodeInvalid},
		{`{"op":"sync"}`, ""},
		{`{"op":"nope"}`, CodeUnknownOp},
		{`{}`, CodeInvalid},
		{`[1,2]`, CodeBadFrame},
		{`{"op":"sync"}{"op":"sync"}`, CodeBadFrame},
		{`{"op":"sync"}}`, CodeBadFrame},
		{`{"op":"sync"} ]`, CodeBadFrame},
		{"{\"op\":\"sync\"} \n", ""},
		{`{"op":"ack","gid":"g","upto":"3"}`, CodeBadFrame},
		{"{\"op\":\"sync\",\"x\":\"\xff\"}", CodeBadFrame},
		{`{"op":"sync","id":"` + strings.Repeat("i", 65) + `"}`, CodeInvalid},
		{`{"op":"cursors","acks":[{"gid":"g","upto":3}],"reads":[{"gid":"g","upto":2}]}`, ""},
		{`{"op":"cursors","reads":[{"gid":"g","upto":-1},{"gid":"h","upto":0}]}`, ""},
		{`{"op":"cursors"}`, CodeInvalid},
		{`{"op":"cursors","acks":[]}`, CodeInvalid},
		{`{"op":"cursors","acks":[{"gid":"g"}]}`, CodeInvalid},
		{`{"op":"cursors","acks":[{"upto":3}]}`, CodeInvalid},
		{`{"op":"cursors","acks":[{"gid":"{g}","upto":3}]}`, CodeInvalid},
		{`{"op":"cursors","reads":[{"gid":"g","upto":-2}]}`, CodeInvalid},
		{`{"op":"cursors","acks":[{"gid":"g","upto":3},{"gid":"g","upto":4}]}`, CodeInvalid},
		{`{"op":"cursors","acks":[{"gid":"g","upto":"3"}]}`, CodeBadFrame},
		{`{"op":"cursors","acks":{"gid":"g","upto":3}}`, CodeBadFrame},
		{`{"op":"cursors","acks":[` + strings.Repeat(`{"gid":"g","upto":1},`, MaxCursors) + `{"gid":"g","upto":1}]}`, CodeInvalid},
	} {
		_, err := Decode([]byte(c.in), 10)
		var perr *Error
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.in, err)
		case c.want != "" && (!errors.As(err, &perr) || perr.Code != c.want || perr.Message == ""):
			t.Errorf("%.50s: %v, want %s", c.in, err, c.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"op":"send","gid":"g","cmid":"c","body":"b"}`, `{"op":"pull","gid":"g","after":5,"limit":10}`, `{"op":"pull","gid":"g","before":9}`,
		`{"op":"ack","gid":"g","upto":1}`, `{"op":"auth","token":"x"}`, `{"op":"sync","id":"1"}`, `{`, `null`, "\xff",
		`{"op":"read_counts","gid":"g","msgids":[41,42]}`, `{"op":"who_read","gid":"g","msgid":42}`, `{"op":"read","gid":"g","upto":-1}`,
		`{"op":"sync"}}`, `{"op":"send","op":"ack","gid":"g","upto":1}`, `{"op":"ack","gid":"g","upto":9223372036854775808}`,
		`{"op":"cursors","acks":[{"gid":"g","upto":3}],"reads":[{"gid":"h","upto":-1}]}`, `{"op":"cursors","acks":[{"gid":"g","upto":3},{"gid":"g","upto":3}]}`,
		`{"op":"cursors","reads":[{"gid":"g"}]}`, `{"op":"cursors","acks":[null]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b, 100)
		if err != nil {
			var perr *Error
			if !errors.As(err, &perr) || perr.Code == "" || perr.Message == "" {
				t.Fatalf("error without code and message: %v", err)
			}
			return
		}
		if len(r.ID) > MaxIDLen {
			t.Fatalf("accepted an id of %d bytes", len(r.ID))
		}
		if r.Op != OpAuth && r.Op != OpSync && r.Op != OpCursors && schema.ValidID(r.Gid) != nil {
			t.Fatalf("accepted %s with gid %q", r.Op, r.Gid)
		}
		switch r.Op {
		case OpSend:
			if len(r.Body) > 100 || r.Body == "" || r.Cmid == "" {
				t.Fatalf("accepted send %+v", r)
			}
		case OpAck, OpRead:
			if r.Upto == nil || *r.Upto < -1 {
				t.Fatalf("accepted cursor %+v", r)
			}
		case OpPull:
			if r.Limit < 0 || r.Limit > MaxLimit || r.Before != nil && *r.Before < 0 {
				t.Fatalf("accepted pull %+v", r)
			}
		case OpReadCounts:
			if len(r.MsgIDs) == 0 || len(r.MsgIDs) > MaxMsgIDs {
				t.Fatalf("accepted read_counts of %d msgids", len(r.MsgIDs))
			}
		case OpWhoRead:
			if r.MsgID == nil || *r.MsgID < 0 {
				t.Fatalf("accepted who_read %+v", r)
			}
		case OpAuth:
			if r.Token == "" || len(r.Token) > MaxTokenLen {
				t.Fatalf("accepted a token of %d bytes", len(r.Token))
			}
		case OpCursors:
			checkCursors(t, r)
		case OpSync:
		default:
			t.Fatalf("accepted op %q", r.Op)
		}
	})
}

// A refused frame's id is echoed in the error frame only when it is within
// the limit: an id of a whole frame's size would be sent back whole.
func TestDecodeEchoesNoIDPastTheLimit(t *testing.T) {
	r, err := Decode([]byte(`{"op":"sync","id":"`+strings.Repeat("i", 50000)+`"}`), 10)
	if err == nil || r.ID != "" {
		t.Fatalf("an id of 50000 bytes: error %v, id of %d bytes to echo", err, len(r.ID))
	}
	r, err = Decode([]byte(`{"op":"send","id":"7","gid":"g","cmid":"c","body":""}`), 10)
	if err == nil || r.ID != "7" {
		t.Fatalf("a refused send: error %v, id %q to echo, want 7", err, r.ID)
	}
}

// A request of the wrong shape is told what shape to send, in words, not
// in Go's type names ("must be a JSON int64", "a JSON struct").
func TestARequestOfTheWrongShapeIsToldTheRightOne(t *testing.T) {
	for in, want := range map[string]string{
		`["x"]`:                             `a request is one JSON object, e.g. {"op":"sync"} (over HTTP, the operation's fields), not a JSON array`,
		`{"op":"ack","gid":"g","upto":"5"}`: `"upto" must be a whole number, not a JSON string`,
		`{"op":"read_counts","gid":"g","msgids":5}`:     `"msgids" must be a list of whole numbers, not a JSON number`,
		`{"op":"read_counts","gid":"g","msgids":["a"]}`: `"msgids" must be a list of whole numbers, not a JSON string`,
		`cmid=c1&body=hi`: `a request is one JSON object, e.g. {"op":"sync"} (over HTTP, the operation's fields): invalid character`,
	} {
		_, err := Decode([]byte(in), 1024)
		var perr *Error
		if !errors.As(err, &perr) || perr.Code != CodeBadFrame || !strings.HasPrefix(perr.Message, want) {
			t.Errorf("Decode(%s) = %v; want bad_frame %q", in, err, want)
		}
	}
}

// A frame that does not decode is still answered with its id when the id
// can be read, so that the client knows which of its requests failed.
func TestAFrameThatDoesNotDecodeKeepsItsReadableID(t *testing.T) {
	for in, want := range map[string]string{
		`{"op":"ack","id":"e","gid":"team","upto":"4"}`:                           "e",
		`{"op":"ack","gid":"team","upto":"4","ID":"e"}`:                           "e",
		`{"op":"sync","id":"e"}}`:                                                 "e",
		`{"op":"sync","id":"e","gid":}`:                                           "e",
		`{"op":"sync","gid":,"id":"e"}`:                                           "", // after what is wrong
		`{"op":"ack","id":5,"gid":"team","upto":"4"}`:                             "",
		`{"op":"ack","id":"e","id":"` + strings.Repeat("i", 65) + `","upto":"4"}`: "",
		`["e"]`: "",
	} {
		r, err := Decode([]byte(in), 10)
		var perr *Error
		if !errors.As(err, &perr) || perr.Code != CodeBadFrame || r.ID != want {
			t.Errorf("Decode(%.60s) = id %q, %v; want bad_frame with id %q", in, r.ID, err, want)
		}
	}
}

// A frame without "op" was answered `the frame has no "op"`, one without
// "gid" `gid: schema: invalid id: length 0, want 1 to 128 bytes`, a
// frame cut short `...: unexpected EOF`, Go's words, and a body too large
// only the limit. Each says what is missing and what to send.
func TestAFrameMissingAPartSaysWhatToSend(t *testing.T) {
	for in, want := range map[string]string{
		`{"id":"1"}`:                           `the frame has no "op": set it to one of auth, send, ack, read, pull, sync, read_counts, who_read and cursors, e.g. {"op":"sync"}`,
		`{"op":"send","cmid":"c","body":"hi"}`: `send needs a "gid": the id of the group, e.g. {"op":"send","gid":"team",...}`,
		`{"op":"pull","after":3}`:              `pull needs a "gid": the id of the group, e.g. {"op":"pull","gid":"team",...}`,
		`{"op":"send","gid":"team","cmid":"c","body":"` + strings.Repeat("x", 2000) + `"}`: `the body is 2000 bytes; the limit is 1024: split it into messages of at most 1024 bytes`,
		`{"op":"send","gid":"team","body":"hi"`:                                            `a request is one JSON object, e.g. {"op":"sync"} (over HTTP, the operation's fields): the JSON ends before the object does (a closing } or " is missing)`,
	} {
		_, err := Decode([]byte(in), 1024)
		if err == nil || err.(*Error).Message != want {
			t.Errorf("Decode(%s) = %v; want %q", in, err, want)
		}
	}
}

// checkCursors fails t unless r, a cursors frame Decode took, holds what
// the gateway may act on: 1 to MaxCursors entries, each a valid gid and a
// msgid or -1, a gid at most once in each list.
func checkCursors(t *testing.T, r Request) {
	t.Helper()
	if n := len(r.Acks) + len(r.Reads); n == 0 || n > MaxCursors {
		t.Fatalf("accepted cursors of %d entries", n)
	}
	for _, l := range [][]Cursor{r.Acks, r.Reads} {
		seen := map[string]bool{}
		for _, c := range l {
			if schema.ValidID(c.Gid) != nil || c.Upto == nil || *c.Upto < -1 || seen[c.Gid] {
				t.Fatalf("accepted cursors entry %+v of %+v", c, l)
			}
			seen[c.Gid] = true
		}
	}
}

// FuzzDecodeCursors builds cursors frames from fuzzed entries, JSON as a
// client writes it, and holds Decode to the frame's rules: it takes the
// frame exactly when every entry is valid, no gid is twice in a list and
// there are 1 to MaxCursors entries, and then gives back the entries as
// sent.
func FuzzDecodeCursors(f *testing.F) {
	f.Add("g1", int64(42), "g2", int64(-1), uint8(1), uint8(1))
	f.Add("g1", int64(42), "g1", int64(7), uint8(2), uint8(0))
	f.Add("", int64(0), "g", int64(-2), uint8(0), uint8(1))
	f.Add("{g}", int64(1), "g", int64(1), uint8(250), uint8(251))
	f.Fuzz(func(t *testing.T, gidA string, uptoA int64, gidB string, uptoB int64, nAcks, nReads uint8) {
		// Entry i of a list is gidA (then gidB) with a suffix, i > 0.
		list := func(n int) []Cursor {
			out := make([]Cursor, n)
			for i := range out {
				gid, upto := gidA, uptoA
				if i%2 == 1 {
					gid, upto = gidB, uptoB
				}
				if i > 1 {
					gid += "-" + strconv.Itoa(i/2)
				}
				out[i] = Cursor{Gid: gid, Upto: &upto}
			}
			return out
		}
		req := Request{Op: OpCursors, ID: "1", Acks: list(int(nAcks) * 2), Reads: list(int(nReads))}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Decode(b, 100)
		ok := len(req.Acks)+len(req.Reads) > 0 && len(req.Acks)+len(req.Reads) <= MaxCursors
		for _, l := range [][]Cursor{req.Acks, req.Reads} {
			seen := map[string]bool{}
			for _, c := range l {
				ok = ok && schema.ValidID(c.Gid) == nil && *c.Upto >= -1 && !seen[c.Gid]
				seen[c.Gid] = true
			}
		}
		if ok != (err == nil) {
			t.Fatalf("Decode of %d acks and %d reads (%q %d, %q %d): %v, want taken %v", len(req.Acks), len(req.Reads), gidA, uptoA, gidB, uptoB, err, ok)
		}
		if err != nil {
			if perr, is := err.(*Error); !is || perr.Code != CodeInvalid && perr.Code != CodeBadFrame || perr.Message == "" {
				t.Fatalf("refused with %v", err)
			}
			return
		}
		checkCursors(t, r)
		same := func(a, b []Cursor) bool {
			return slices.EqualFunc(a, b, func(x, y Cursor) bool { return x.Gid == y.Gid && *x.Upto == *y.Upto })
		}
		if !same(r.Acks, req.Acks) || !same(r.Reads, req.Reads) {
			t.Fatalf("entries decoded as %+v %+v, sent %+v %+v", r.Acks, r.Reads, req.Acks, req.Reads)
		}
	})
}
