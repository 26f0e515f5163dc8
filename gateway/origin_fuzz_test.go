package gateway

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// browserOrigin is an Origin header as a browser writes it for a page
// served over the network: scheme://host[:port], nothing else.
var browserOrigin = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*://([a-zA-Z0-9.-]*(?::[0-9]*)?)$`)

// plainPattern is a pattern of the forms CHAT_ALLOWED_ORIGINS documents:
// a host (with a port, perhaps), *.domain, or *.
var plainPattern = regexp.MustCompile(`^(?:\*|(?:\*\.)?[a-zA-Z0-9.-]+(?::[0-9]+)?)$`)

// FuzzAllowedOrigin holds the early check of a browser page's origin,
// which answers with what its operator sets, to the WebSocket library's,
// which decides. For any Origin, Host and patterns that chatd takes
// (path.Match patterns, checked at its start), allowedOrigin allows
// exactly what websocket.Accept lets through (over plain HTTP: over TLS
// it also refuses an http:// page of the server's own host, which the
// library takes; TestBrowserPagesConnectOnlyFromAllowedOrigins). On an origin as browsers
// write it and patterns of the forms documented, it agrees with a reading
// written out by hand, so never allows a host outside the list: the
// server's own, one listed (any case), one under a *.domain listed, or
// any for "*". It names the origin's host, or the origin when that has
// none or does not parse.
func FuzzAllowedOrigin(f *testing.F) {
	for _, c := range [][4]string{
		{"", "chat.example.com", "", ""},
		{"https://chat.example.com", "chat.example.com", "", ""},
		{"https://app.chat.example.com", "127.0.0.1:8080", "*.chat.example.com", ""},
		{"https://APP.Chat.Example.com", "127.0.0.1:8080", "*.chat.example.com", ""},
		{"https://a.b.chat.example.com", "127.0.0.1:8080", "*.chat.example.com", ""},
		{"https://chat.example.com", "127.0.0.1:8080", "*.chat.example.com", ""},
		{"https://evil.example.net", "127.0.0.1:8080", "*.chat.example.com", "chat.example.com"},
		{"https://chat.example.com.evil.net", "127.0.0.1:8080", "chat.example.com", "*.example.com"},
		{"https://chat.example.com:8443", "127.0.0.1:8080", "chat.example.com", ""},
		{"https://chat.example.com:8443", "127.0.0.1:8080", "chat.example.com:8443", ""},
		{"https://chat.example.com@evil.net", "127.0.0.1:8080", "chat.example.com", ""},
		{"https://evil.net/chat.example.com", "127.0.0.1:8080", "chat.example.com", ""},
		{"http://chat.example.com", "127.0.0.1:8080", "https://chat.example.com", ""},
		{"https://chat.example.com", "127.0.0.1:8080", "https://*.example.com", "http://chat.example.com"},
		{"null", "127.0.0.1:8080", "*", ""},
		{"null", "127.0.0.1:8080", "*.example.com", ""},
		{"not a url", "127.0.0.1:8080", "*", ""},
		{"http://[::1]:8080", "[::1]:8080", "", ""},
		{"https://x.example.com", "127.0.0.1:8080", "[", "*"},
		{"https://x.example.com", "127.0.0.1:8080", "x.example.co?", "\\x.example.com"},
		{"https://\u212a.example.com", "127.0.0.1:8080", "k.example.com", ""},
	} {
		f.Add(c[0], c[1], c[2], c[3])
	}
	f.Fuzz(func(t *testing.T, origin, host, p1, p2 string) {
		var patterns []string
		for _, p := range []string{p1, p2} {
			if p != "" {
				patterns = append(patterns, p)
			}
		}
		req := func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "/v1/ws", nil)
			r.Host = host
			if origin != "" {
				r.Header.Set("Origin", origin)
			}
			return r
		}
		named, ok := allowedOrigin(req(), patterns)
		if origin == "" {
			if !ok || named != "" {
				t.Fatalf("no Origin: %q, %v; want it allowed", named, ok)
			}
			return
		}
		u, err := url.Parse(origin)
		if err != nil {
			if ok || named != origin {
				t.Fatalf("Origin %q, which does not parse: %q, %v; want it refused, named as is", origin, named, ok)
			}
			return
		}
		if want := cmp.Or(u.Host, origin); ok && named != u.Host || !ok && named != want {
			t.Fatalf("Origin %q: %q, %v; want it named %q", origin, named, ok, want)
		}

		if m := browserOrigin.FindStringSubmatch(origin); m != nil && allMatch(plainPattern, patterns) {
			h := strings.ToLower(m[1])
			want := strings.EqualFold(host, m[1])
			for _, p := range patterns {
				p = strings.ToLower(p)
				want = want || p == "*" || p == h || strings.HasPrefix(p, "*.") && strings.HasSuffix(h, p[1:])
			}
			if ok != want {
				t.Fatalf("Origin %q on %q with %q: allowed %v; want %v", origin, host, patterns, ok, want)
			}
		}

		for _, p := range patterns {
			if _, err := path.Match(p, ""); err != nil {
				return // chatd refuses it at start; the library refuses every origin not the server's
			}
		}
		w := httptest.NewRecorder()
		r := req()
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Sec-WebSocket-Version", "13")
		r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		if c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: patterns}); err == nil {
			c.CloseNow()
			t.Fatal("Accept upgraded a response recorder")
		}
		// Past the origin, Accept fails on the recorder, which cannot be
		// hijacked: 501, not 403.
		if libOK := w.Code != http.StatusForbidden; libOK != ok {
			t.Fatalf("Origin %q on %q with %q: allowed %v, the WebSocket library %v (%d %s)", origin, host, patterns, ok, libOK, w.Code, strings.TrimSpace(w.Body.String()))
		}
	})
}

func allMatch(re *regexp.Regexp, ss []string) bool {
	for _, s := range ss {
		if !re.MatchString(s) {
			return false
		}
	}
	return true
}
