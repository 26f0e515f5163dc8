package gateway

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzBearer feeds the readers of a request's token (the Authorization
// header; for a WebSocket upgrade also ?token=) any header and query. The
// header's token is what follows "Bearer " (any case), without the space
// around it, and nothing else is one; a WebSocket's ?token= wins over the
// header; a token given in the header reads back as itself.
func FuzzBearer(f *testing.F) {
	f.Add("Bearer abc.def.ghi", "", "abc")
	f.Add("bearer  abc ", "token=x", "a.b.c")
	f.Add("Basic dXNlcjpwYXNz", "token=", "t")
	f.Add("Bearer", "token=%zz", "t")
	f.Add("BEARER\tabc", "token=a+b&token=c", "t")
	f.Fuzz(func(t *testing.T, header, query, tok string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/ws", nil)
		r.Header.Set("Authorization", header)
		r.URL.RawQuery = query
		h := r.Header.Get("Authorization")
		want := ""
		if len(h) >= 7 && strings.EqualFold(h[:7], "bearer ") {
			want = strings.TrimSpace(h[7:])
		}
		if got := bearer(r); got != want {
			t.Fatalf("Authorization %q: bearer %q, want %q", h, got, want)
		}
		q, _ := url.ParseQuery(query)
		if qt := q.Get("token"); qt != "" && wsToken(r) != qt || qt == "" && wsToken(r) != want {
			t.Fatalf("query %q, Authorization %q: wsToken %q", query, h, wsToken(r))
		}
		tok = strings.TrimSpace(tok)
		if tok == "" || strings.ContainsAny(tok, "\r\n\x00") {
			return
		}
		r.Header.Set("Authorization", "bEaReR "+tok)
		if got := bearer(r); got != tok {
			t.Fatalf("Authorization %q: bearer %q, want %q", r.Header.Get("Authorization"), got, tok)
		}
	})
}
