package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/groupchat/chatd/protocol"
)

// FuzzReadGroupRequest feeds an administration body and the path's gid to
// the body's reader. A refusal is bad_frame (or body_too_large, for a body
// past the limit); what it takes is the body's first JSON value, an object
// or null, with the path's gid, when there is one, in place of the body's.
func FuzzReadGroupRequest(f *testing.F) {
	for _, s := range [][2]string{
		{`{"gid":"g1","members":["alice","bob"]}`, ""},
		{`{"uid":"carol"}`, "g1"},
		{`{"gid":"other","uid":"carol"}`, "g1"},
		{`{"members":[]}`, ""},
		{`{"members":null,"gid":null}`, ""},
		{`{"members":"alice"}`, ""},
		{`{"members":[1]}`, ""},
		{`{"gid":"g1"} {"gid":"g2"}`, ""},
		{`null`, "g1"},
		{`[]`, ""},
		{`"g1"`, ""},
		{``, "g1"},
		{`{`, ""},
		{"{\"gid\":\"\xff\"}", ""},
	} {
		f.Add([]byte(s[0]), s[1])
	}
	g := &Gateway{}
	f.Fuzz(func(t *testing.T, body []byte, gid string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/admin/groups", bytes.NewReader(body))
		r.SetPathValue("gid", gid)
		req, perr := g.readGroupRequest(r)
		if perr != nil {
			codes := []protocol.Code{protocol.CodeBadFrame}
			if len(body) > maxGroupBody {
				codes = append(codes, protocol.CodeBodyTooLarge)
			}
			checkRefusal(t, "body "+string(body), perr, codes...)
			return
		}
		var first json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&first); err != nil || first[0] != '{' && string(first) != "null" {
			t.Fatalf("took %q, whose first value is %q (%v)", body, first, err)
		}
		var want groupRequest
		json.Unmarshal(first, &want)
		if gid != "" {
			want.Gid = gid
		}
		if req.Gid != want.Gid || req.Uid != want.Uid || !slices.Equal(req.Members, want.Members) {
			t.Fatalf("body %q on %q read as %+v, want %+v", body, gid, req, want)
		}
	})
}
