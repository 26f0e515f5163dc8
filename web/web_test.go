package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

func TestHandlerServesThePage(t *testing.T) {
	h := Handler(0)
	for _, c := range []struct{ path, ctype, contains string }{
		{"/", "text/html", `<script type="module" src="app.js">`},
		{"/index.html", "text/html", "<title>chatd</title>"},
		{"/app.js", "text/javascript", "from './chat.js'"},
		{"/chat.js", "text/javascript", "export class Chat"},
		{"/conn.js", "text/javascript", "export class Conn"},
		{"/style.css", "text/css", "#banner"},
	} {
		resp := get(t, h, "GET", c.path, nil)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) || !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.contains, strings.Contains(string(body), c.contains))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: CSP %q, nosniff %q", c.path, csp, resp.Header.Get("X-Content-Type-Options"))
		}
		// A reload revalidates and gets 304 while the file is unchanged.
		etag := resp.Header.Get("ETag")
		if again := get(t, h, "GET", c.path, map[string]string{"If-None-Match": etag}); etag == "" || again.StatusCode != 304 {
			t.Errorf("GET %s with If-None-Match %q: %d, want 304", c.path, etag, again.StatusCode)
		}
	}
	if resp := get(t, h, "HEAD", "/", nil); resp.StatusCode != 200 {
		t.Errorf("HEAD /: %d", resp.StatusCode)
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/nope.js", 404},
		{"GET", "/static/app.js", 404},
		{"GET", "/v1/ws", 404}, // the API is mounted beside, never served from here
		{"POST", "/", 405},
		{"DELETE", "/app.js", 405},
	} {
		resp := get(t, h, c.method, c.path, nil)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != c.status || len(body) == 0 {
			t.Errorf("%s %s: %d %q, want %d with a message", c.method, c.path, resp.StatusCode, body, c.status)
		}
	}
}

// Every file the page names (scripts, styles, module imports) is served.
func TestPageReferencesResolve(t *testing.T) {
	h := Handler(0)
	ref := regexp.MustCompile(`(?:src|href)="([^"]+)"|from '\./([^']+)'`)
	seen := map[string]bool{}
	queue := []string{"index.html"}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		resp := get(t, h, "GET", "/"+name, nil)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("the page refers to %s, which is %d", name, resp.StatusCode)
			continue
		}
		for _, m := range ref.FindAllStringSubmatch(string(body), -1) {
			queue = append(queue, m[1]+m[2])
		}
	}
	for _, want := range []string{"app.js", "chat.js", "conn.js", "cursors.js", "outbox.js", "frames.js", "admin.js", "style.css"} {
		if !seen[want] {
			t.Errorf("%s is not reachable from index.html", want)
		}
	}
}
