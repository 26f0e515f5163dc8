package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/groupchat/chatd/web"
)

// The HTTP listeners of a role: its public address (the API, the page,
// health and, unless it has its own, metrics), the metrics listener and
// the profiler's.

func (st *stack) routes() *http.ServeMux {
	mux := http.NewServeMux()
	health := st.s.answerWithin(http.HandlerFunc(st.health))
	mux.Handle("GET /healthz", health)
	mux.Handle("GET /readyz", health)
	if st.s.MetricsAddr == "" {
		mux.Handle("GET /metrics", st.s.answerWithin(st.metricsHandler()))
	}
	if st.gateway != nil {
		mux.Handle("/v1/", st.gateway.Handler())            // sets its answers' deadlines itself
		mux.Handle("/", web.Handler(st.s.HTTPWriteTimeout)) // the web client
	}
	return mux
}

// answerWithin gives h's answers the write timeout to be taken in, from
// the request, for a handler that waits on nothing slow: a client that
// never reads cannot hold the request's goroutine for ever. The server
// clears the deadline once the answer is written, before a keep-alive
// connection's next request.
func (s *settings) answerWithin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.HTTPWriteTimeout))
		h.ServeHTTP(w, r)
	})
}

// health answers 200 once every part is ready (the projections have read
// their topics to the end once since start), else 503 naming what is not.
func (st *stack) health(w http.ResponseWriter, r *http.Request) {
	var waiting []string
	for _, p := range st.parts {
		if p.ready != nil && !p.ready() {
			waiting = append(waiting, p.name)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if len(waiting) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]any{"status": "waiting", "role": st.role, "waiting_for": waiting})
		return
	}
	json.NewEncoder(w).Encode(map[string]any{"status": "ok", "role": st.role})
}

// Limits of the HTTP server on what a client sends before its handler has
// it. Headers hold at most a token (4 KiB), a URL of the API and what
// proxies add.
const (
	readHeaderTimeout = 5 * time.Second
	maxHeaderBytes    = 64 << 10
)

// httpServer is the HTTP server of h with the limits that let a client
// that stalls go: in its headers, in its body (the read timeout), or
// between requests (the idle timeout). A WebSocket, hijacked from it,
// is not subject to them: the gateway has its own (pings, AuthTimeout).
// When no handler of h waits on anything slow (slow false), the server's
// write timeout bounds every answer, the 404s too. Otherwise it has none:
// it would also cut a request that waits on a stalled broker (a send
// retries for up to 30 s), or a CPU profile, without an answer. The
// gateway sets a deadline on each answer instead, once its work is done,
// and the other handlers from the request (answerWithin, web.Handler).
func (s *settings) httpServer(h http.Handler, slow bool) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: s.HTTPReadTimeout,
		IdleTimeout: s.HTTPIdleTimeout, MaxHeaderBytes: maxHeaderBytes}
	if !slow {
		srv.WriteTimeout = s.HTTPWriteTimeout
	}
	return srv
}

func (st *stack) metricsHandler() http.Handler {
	return promhttp.HandlerFor(st.reg, promhttp.HandlerOpts{Registry: st.reg})
}

// serveMetrics serves /metrics on its own listener (CHAT_METRICS_ADDR),
// apart from the public HTTP address, until ctx ends.
func (st *stack) serveMetrics(ctx context.Context) (string, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", st.metricsHandler())
	return serveAside(ctx, "metrics", st.s.MetricsAddr, "CHAT_METRICS_ADDR", st.s.httpServer(mux, false))
}

// serveDebug serves net/http/pprof on its own listener, apart from the
// public HTTP address, until ctx ends.
func (s *settings) serveDebug(ctx context.Context) (string, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return serveAside(ctx, "debug", s.DebugAddr, "CHAT_DEBUG_ADDR", s.httpServer(mux, true))
}

// serveAside serves srv on a listener of its own at addr (the setting
// env names it) until ctx ends, and returns the address it listens on.
func serveAside(ctx context.Context, what, addr, env string, srv *http.Server) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%s listen on %s: %w; set %s to a free host:port (e.g. %s) or leave it empty", what, addr, err, env, otherAddr(addr, err, "127.0.0.1:6060"))
	}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go srv.Serve(ln)
	return ln.Addr().String(), nil
}

// otherAddr is an address to suggest in place of addr, whose listen
// failed with err: when addr's port is in use (suggesting it again would
// fail the same way), the next one on the same host that is free now,
// looked at by listening on it; else example.
func otherAddr(addr string, err error, example string) string {
	host, port, serr := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if !errors.Is(err, syscall.EADDRINUSE) || serr != nil || perr != nil || n <= 0 {
		return example
	}
	for p := n + 1; p <= min(n+100, 65535); p++ {
		a := net.JoinHostPort(host, strconv.Itoa(p))
		if ln, err := net.Listen("tcp", a); err == nil {
			ln.Close()
			return a
		}
	}
	return example
}

// loopback reports whether a listener's address (host:port) is reachable
// only from this machine.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback() || host == "localhost"
}
