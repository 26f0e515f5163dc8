package gateway

import (
	"net/http"
	"net/url"
	"path"
	"strings"
)

// allowedOrigin reports whether a browser page's origin may connect, as
// the WebSocket library decides it: no Origin (not a browser), the
// server's own host, or a host matching one of patterns (path.Match, any
// case; a pattern with "://" matches the scheme too). It returns the
// origin's host. Over TLS served here, the server's own host is its
// https:// pages only (plainPage): the library takes an http:// page of
// it too, whose script anyone on the network path can write.
func allowedOrigin(r *http.Request, patterns []string) (string, bool) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return "", true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return origin, false
	}
	if strings.EqualFold(r.Host, u.Host) && !plainPage(r, u) {
		return u.Host, true
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return u.Host, true // "*" takes an origin of no host too ("null": a file, a sandbox)
		}
	}
	if u.Host == "" {
		return origin, false
	}
	return u.Host, false
}

// plainPage tells a page served over plain HTTP (origin u) connecting to
// this server over TLS.
func plainPage(r *http.Request, u *url.URL) bool {
	return r.TLS != nil && !strings.EqualFold(u.Scheme, "https")
}
