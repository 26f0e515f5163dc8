// Package web is the page chatd serves at / on the roles that run a gateway:
// a plain-JavaScript client (no build step) that speaks PROTOCOL.md over
// WebSocket the way the Go SDK does, embedded in the binary.
//
// Handler is safe for concurrent use; the files are read-only.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// The page talks only to the server that served it.
const csp = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " +
	"object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

type file struct {
	body  []byte
	etag  string
	ctype string
}

// DefaultWriteTimeout is the time a client has to take in an answer when
// Handler is given none.
const DefaultWriteTimeout = 10 * time.Second

// Handler serves the page's files: GET or HEAD of / (index.html) and of
// each file by name. Anything else is 404 (or 405 for other methods), so
// it can be mounted at / beside the API. Files are revalidated by ETag on
// every load, so a new binary's page is used at once.
//
// An answer has writeTimeout (0: DefaultWriteTimeout) to be taken in,
// from the request: a client that never reads cannot hold the request's
// goroutine for ever. The server clears the deadline once the answer is
// written, before a keep-alive connection's next request.
func Handler(writeTimeout time.Duration) http.Handler {
	if writeTimeout <= 0 {
		writeTimeout = DefaultWriteTimeout
	}
	files := map[string]file{}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic("web: " + err.Error()) // the embed directive guarantees the directory
	}
	fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(sub, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype := mime.TypeByExtension(path.Ext(name))
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		files[name] = file{body: body, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: ctype}
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" {
			name = "index.html"
		}
		f, ok := files[name]
		if !ok {
			http.Error(w, "not found: this server's page is at /, its API under /v1/", http.StatusNotFound)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the page's files are read with GET", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.ctype)
		h.Set("ETag", f.etag)
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
