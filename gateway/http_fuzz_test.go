package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// checkRefusal fails t unless err is a *protocol.Error with a code of
// codes and a message.
func checkRefusal(t *testing.T, what string, err error, codes ...protocol.Code) {
	t.Helper()
	var perr *protocol.Error
	if !errors.As(err, &perr) || perr.Code == "" || perr.Message == "" {
		t.Fatalf("%s: refused with %v, not a protocol error with a code and a message", what, err)
	}
	if len(codes) > 0 && !slices.Contains(codes, perr.Code) {
		t.Fatalf("%s: refused with code %s, want one of %v", what, perr.Code, codes)
	}
}

// getOps are the operations the HTTP API reads from a GET's query.
var getOps = []string{protocol.OpPull, protocol.OpSync, protocol.OpReadCounts, protocol.OpWhoRead}

// FuzzQueryBody feeds the HTTP API's GET parsing any query and msgid path
// segment. A refusal is a protocol error; what it takes carries exactly
// the integers given, under their own names, and the operation decoded
// from it holds the same integers.
func FuzzQueryBody(f *testing.F) {
	for _, s := range [][2]string{
		{"after=5&limit=10", ""},
		{"before=9", ""},
		{"after=-1&before=0&limit=1000", ""},
		{"msgids=41,42", ""},
		{"", "42"},
		{"limit=0&token=x", "0"},
		{"after=%2B5&limit=007", ""}, // +5 and 007: strconv takes them, JSON does not
		{"after=-0", ""},
		{"after=x", ""},
		{"limit=9223372036854775808", ""},
		{"before=-9223372036854775808", ""},
		{"msgids=1,,2", ""},
		{"msgids=,", ""},
		{"msgids=" + strings.Repeat("7,", protocol.MaxMsgIDs-1) + "7", ""},
		{"msgids=" + strings.Repeat("7,", protocol.MaxMsgIDs) + "7", ""},
		{"after=5&after=x", ""},
		{"after=%zz;limit=3", ""},
		{"", "1e3"},
		{"", "-1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, query, msgid string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/sync", nil)
		r.URL.RawQuery = query
		r.SetPathValue("msgid", msgid)
		b, perr := queryBody(r)
		if perr != nil {
			checkRefusal(t, "query "+query, perr, protocol.CodeBadFrame, protocol.CodeInvalid)
			return
		}
		q := r.URL.Query()
		var got map[string]json.RawMessage
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("query %q gave %s, not a JSON object: %v", query, b, err)
		}
		want := map[string]int64{}
		for key, given := range map[string]string{"after": q.Get("after"), "before": q.Get("before"), "limit": q.Get("limit"), "msgid": msgid} {
			raw, ok := got[key]
			delete(got, key)
			if given == "" {
				if ok {
					t.Fatalf("query %q, msgid %q: %s set to %s, given nothing", query, msgid, key, raw)
				}
				continue
			}
			n, err := strconv.ParseInt(given, 10, 64)
			if err != nil {
				t.Fatalf("query %q, msgid %q: took %s=%q, not an integer", query, msgid, key, given)
			}
			var v int64
			if err := json.Unmarshal(raw, &v); err != nil || v != n {
				t.Fatalf("query %q, msgid %q: %s=%q came out as %s", query, msgid, key, given, raw)
			}
			want[key] = n
		}
		var ids []int64
		if s := q.Get("msgids"); s != "" {
			for _, id := range strings.Split(s, ",") {
				n, err := strconv.ParseInt(id, 10, 64)
				if err != nil {
					t.Fatalf("query %q: took msgid %q, not an integer", query, id)
				}
				ids = append(ids, n)
			}
			if len(ids) > protocol.MaxMsgIDs {
				t.Fatalf("query %q: took %d msgids", query, len(ids))
			}
			var v []int64
			if err := json.Unmarshal(got["msgids"], &v); err != nil || !slices.Equal(v, ids) {
				t.Fatalf("query %q: msgids came out as %s, want %v", query, got["msgids"], ids)
			}
			delete(got, "msgids")
		}
		if len(got) > 0 {
			t.Fatalf("query %q, msgid %q: fields not asked for: %s", query, msgid, b)
		}

		for _, op := range getOps {
			gid := "g1"
			if op == protocol.OpSync {
				gid = "" // GET /v1/sync has no gid
			}
			req, err := protocol.Decode(withFields(b, op, gid), 100)
			if err != nil {
				checkRefusal(t, op+" of "+string(b), err)
				continue
			}
			if req.Op != op || req.Gid != gid {
				t.Fatalf("%s of %s decoded as %s of %q", op, b, req.Op, req.Gid)
			}
			for key, p := range map[string]*int64{"after": req.After, "before": req.Before, "msgid": req.MsgID} {
				n, given := want[key]
				if given != (p != nil) || given && *p != n {
					t.Fatalf("%s of %s: %s decoded as %v, given %d (%t)", op, b, key, p, n, given)
				}
			}
			if int64(req.Limit) != want["limit"] || !slices.Equal(req.MsgIDs, ids) {
				t.Fatalf("%s of %s: limit %d and msgids %v, want %d and %v", op, b, req.Limit, req.MsgIDs, want["limit"], ids)
			}
		}
	})
}

// FuzzAPIBody feeds the HTTP API's body parsing (the path's operation and
// gid set into the body, then the frame decoder) any body and gid. A
// refusal is a protocol error; an accepted request is the path's
// operation on the path's gid, from a body of UTF-8 JSON.
func FuzzAPIBody(f *testing.F) {
	for _, s := range [][2]string{
		{`{"cmid":"c1","body":"hi"}`, "g1"},
		{`{"upto":42}`, "g1"},
		{`{"upto":-1,"id":"7"}`, "g1"},
		{`{"op":"auth","token":"x","upto":1}`, "g1"},
		{`{"gid":"other","upto":1}`, "g1"},
		{`{"Gid":"other","OP":"sync","upto":1}`, "g1"},
		{`{"upto":1}`, ""},
		{`{"upto":1}`, "a b"},
		{`{"upto":"1"}`, "g1"},
		{"{\"cmid\":\"c1\",\"body\":\"\xff\"}", "g1"}, // not UTF-8
		{"{\"\x84\":0,\"upto\":1}", "g1"},             // not UTF-8, in a key the body's rewriting replaced
		{`{"cmid":"c1","body":"hi"}}`, "g1"},
		{`{"upto":1}{"upto":2}`, "g1"},
		{`null`, "g1"},
		{`[]`, "g1"},
		{``, "g1"},
		{`{`, "g1"},
	} {
		f.Add([]byte(s[0]), s[1])
	}
	f.Fuzz(func(t *testing.T, body []byte, gid string) {
		for _, op := range []string{protocol.OpSend, protocol.OpAck, protocol.OpRead, protocol.OpPull} {
			req, err := protocol.Decode(withFields(body, op, gid), 100)
			if err != nil {
				checkRefusal(t, op+" of "+string(body), err)
				continue
			}
			if req.Op != op || gid != "" && req.Gid != gid || schema.ValidID(req.Gid) != nil {
				t.Fatalf("%s on %q of %q decoded as %s on %q", op, gid, body, req.Op, req.Gid)
			}
			var m map[string]json.RawMessage
			if !utf8.Valid(body) || json.Unmarshal(body, &m) != nil || m == nil {
				t.Fatalf("%s on %q took %q, not a UTF-8 JSON object", op, gid, body)
			}
		}
	})
}

// FuzzDevToken posts any body and query to the dev-token endpoint. It
// answers a token that verifies as the uid it names, or a bad_frame or
// invalid refusal in the API's JSON.
func FuzzDevToken(f *testing.F) {
	for _, s := range [][2]string{
		{`{"uid":"alice"}`, ""},
		{``, "uid=bob"},
		{`{}`, "uid=bob"},
		{`{"uid":""}`, "uid=a%20b"},
		{`{"uid":"alice"} trailing`, ""},
		{`{"uid":"` + strings.Repeat("u", schema.MaxIDLen+1) + `"}`, ""},
		{`{"uid":1}`, ""},
		{`{"uid":"a/b"}`, ""},
		{`[`, ""},
		{`null`, "uid=carol"},
	} {
		f.Add([]byte(s[0]), s[1])
	}
	secret := bytes.Repeat([]byte("k"), 32)
	g := &Gateway{cfg: Config{Secret: secret, TokenTTL: time.Hour, MaxTokenTTL: time.Hour}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/dev/token", bytes.NewReader(body))
		r.URL.RawQuery = query
		w := httptest.NewRecorder()
		g.devToken(w, r)
		var ans map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil {
			t.Fatalf("answer %q: %v", w.Body, err)
		}
		if w.Code != http.StatusOK {
			code := protocol.Code(ans["code"])
			if code != protocol.CodeBadFrame && code != protocol.CodeInvalid || ans["message"] == "" || w.Code != code.HTTPStatus() {
				t.Fatalf("refused with %d %v", w.Code, ans)
			}
			return
		}
		uid, perr := verify(secret, ans["token"], time.Hour)
		if perr != nil || uid != ans["uid"] || schema.ValidID(uid) != nil {
			t.Fatalf("answered %v: the token names %q (%v)", ans, uid, perr)
		}
	})
}
