package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/groupchat/chatd/protocol"
)

// routes adds the HTTP API: the client operations for bots and curl users,
// administration behind the admin token, and dev tokens when enabled.
func (g *Gateway) routes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/groups/{gid}/messages", g.api(protocol.OpSend))
	mux.HandleFunc("GET /v1/groups/{gid}/messages", g.api(protocol.OpPull))
	mux.HandleFunc("POST /v1/groups/{gid}/ack", g.api(protocol.OpAck))
	mux.HandleFunc("POST /v1/groups/{gid}/read", g.api(protocol.OpRead))
	mux.HandleFunc("POST /v1/cursors", g.api(protocol.OpCursors))
	mux.HandleFunc("GET /v1/sync", g.api(protocol.OpSync))
	mux.HandleFunc("GET /v1/groups/{gid}/read_counts", g.api(protocol.OpReadCounts))
	mux.HandleFunc("GET /v1/groups/{gid}/messages/{msgid}/readers", g.api(protocol.OpWhoRead))
	mux.HandleFunc("POST /v1/admin/groups", g.admin(g.createGroup))
	mux.HandleFunc("POST /v1/admin/groups/{gid}/members", g.admin(g.addMember))
	mux.HandleFunc("DELETE /v1/admin/groups/{gid}/members/{uid}", g.admin(g.removeMember))
	if g.cfg.DevTokens {
		mux.HandleFunc("POST /v1/dev/token", g.devToken)
		g.devRoutes(mux)
	}
	mux.HandleFunc("/v1/", g.noRoute(mux))
}

// noRoute answers, in the API's JSON, what no route takes: an unknown
// path (404), or a known one asked with another method (405, with Allow).
func (g *Gateway) noRoute(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path[:min(len(r.URL.Path), 200)]
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := mux.Handler(probe); p != "" && p != "/v1/" {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			g.writeErr(w, protocol.Errorf(protocol.CodeNotFound, "no route %s %s; the HTTP API's routes are in PROTOCOL.md", r.Method, path))
			return
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		g.writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"code": string(protocol.CodeNotFound),
			"message": fmt.Sprintf("%s takes %s, not %s", path, strings.Join(allow, " or "), r.Method)})
	}
}

// api adapts an operation to HTTP: the bearer token names the user, the
// body (POST) or query (GET) holds the fields, the answer is the frame.
func (g *Gateway) api(op string) http.HandlerFunc {
	return g.asUser(func(ctx context.Context, uid string, r *http.Request) (any, *protocol.Error) {
		body := []byte("{}")
		if r.Method == http.MethodPost {
			b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, g.cfg.maxFrame()))
			var tooLarge *http.MaxBytesError
			switch {
			case errors.As(err, &tooLarge):
				return nil, protocol.Errorf(protocol.CodeBodyTooLarge, "the request body is over the limit of %d bytes (a message body of at most %d bytes, JSON-escaped)", g.cfg.maxFrame(), g.cfg.MaxBody)
			case err != nil:
				return nil, protocol.Errorf(protocol.CodeBadFrame, "the request body did not arrive whole (%v); send it again", err)
			}
			// No body, or null, has no fields: the answer names the
			// first one missing.
			if b = bytes.TrimSpace(b); len(b) > 0 && !bytes.Equal(b, []byte("null")) {
				body = b
			}
		}
		if r.Method == http.MethodGet {
			var perr *protocol.Error
			if body, perr = queryBody(r); perr != nil {
				return nil, perr
			}
		}
		req, err := protocol.Decode(withFields(body, op, r.PathValue("gid")), g.cfg.MaxBody)
		if err != nil {
			return nil, asProtocol(err)
		}
		if req.Op == protocol.OpSend && !g.sends.take(uid, g.cfg.SendRate, g.cfg.SendBurst) {
			return nil, protocol.Errorf(protocol.CodeRateLimited, "more than %.0f sends per second; retry later with the same cmid", g.cfg.SendRate)
		}
		ans, perr := g.do(ctx, uid, &req)
		if n := extraFrames(&req, ans); n > 0 {
			rate, burst := g.cfg.frameRate()
			g.httpUsers.charge(uid, n, rate, burst)
		}
		return ans, perr
	})
}

// asUser guards a handler with a user's bearer token, and holds the user
// to their HTTP rate and requests in hand (httpUsers).
func (g *Gateway) asUser(h func(ctx context.Context, uid string, r *http.Request) (any, *protocol.Error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		if tok == "" {
			g.writeErr(w, protocol.Errorf(protocol.CodeUnauthenticated, "send Authorization: Bearer <token> (the HTTP API takes no ?token=, which access logs keep)"))
			return
		}
		uid, perr := verify(g.cfg.Secret, tok, g.cfg.MaxTokenTTL)
		if perr != nil {
			g.writeErr(w, perr)
			return
		}
		rate, burst := g.cfg.frameRate()
		if perr := g.httpUsers.enter(uid, rate, burst); perr != nil {
			g.writeErr(w, perr)
			return
		}
		defer g.httpUsers.leave(uid)
		ans, perr := h(r.Context(), uid, r)
		if perr != nil {
			g.writeErr(w, perr)
			return
		}
		g.writeJSON(w, http.StatusOK, ans)
	}
}

// withFields sets "op" and the path's gid in a JSON object body, so HTTP
// bodies need not carry them and one decoder validates everything.
func withFields(body []byte, op, gid string) []byte {
	var m map[string]json.RawMessage
	// Not UTF-8: rewritten, its bad bytes would become U+FFFD and pass.
	if !utf8.Valid(body) || json.Unmarshal(body, &m) != nil || m == nil {
		return body // Decode reports the error
	}
	m["op"], _ = json.Marshal(op)
	if gid != "" {
		m["gid"], _ = json.Marshal(gid)
	}
	b, _ := json.Marshal(m)
	return b
}

// queryBody turns a GET's query (after, before, limit, msgids=1,2,3) and path
// (msgid) into the JSON body of the operation, so one decoder checks both.
func queryBody(r *http.Request) ([]byte, *protocol.Error) {
	q := r.URL.Query()
	m := map[string]json.RawMessage{}
	for _, f := range []struct{ key, val string }{
		{"after", q.Get("after")}, {"before", q.Get("before")}, {"limit", q.Get("limit")}, {"msgid", r.PathValue("msgid")},
	} {
		if f.val == "" {
			continue
		}
		n, err := strconv.ParseInt(f.val, 10, 64)
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeBadFrame, "%s must be an integer, got %q", f.key, f.val[:min(len(f.val), 40)])
		}
		// As JSON writes it: strconv takes "+5" and "007", JSON does not.
		m[f.key] = strconv.AppendInt(nil, n, 10)
	}
	if s := q.Get("msgids"); s != "" {
		var ids []int64
		for _, id := range strings.Split(s, ",") {
			n, err := strconv.ParseInt(id, 10, 64)
			if err != nil {
				return nil, protocol.Errorf(protocol.CodeBadFrame, "msgids must be msgids separated by commas (msgids=41,42); %q is not one", id[:min(len(id), 40)])
			}
			if ids = append(ids, n); len(ids) > protocol.MaxMsgIDs {
				return nil, protocol.Errorf(protocol.CodeInvalid, "read_counts needs 1 to %d msgids", protocol.MaxMsgIDs)
			}
		}
		m["msgids"], _ = json.Marshal(ids)
	}
	b, _ := json.Marshal(m)
	return b, nil
}

// devToken hands out a token for any user id. Only `chatd dev` serves it.
func (g *Gateway) devToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Uid string `json:"uid"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		g.writeErr(w, protocol.Errorf(protocol.CodeBadFrame, "the body must be {\"uid\":\"...\"}"))
		return
	}
	if req.Uid == "" {
		req.Uid = r.URL.Query().Get("uid")
	}
	if perr := needID(`"uid"`, req.Uid, `{"uid":"alice"} (or ?uid=alice)`); perr != nil {
		g.writeErr(w, perr)
		return
	}
	tok, err := IssueToken(g.cfg.Secret, req.Uid, g.cfg.TokenTTL)
	if err != nil {
		g.writeErr(w, protocol.Errorf(protocol.CodeInvalid, "uid: %v", err))
		return
	}
	g.writeJSON(w, http.StatusOK, map[string]string{"uid": req.Uid, "token": tok})
}

// writeJSON answers v. The work is done by then: the answer has
// WriteTimeout to be taken in, as a WebSocket's frames have, so that a
// client that never reads it cannot hold the request's goroutine for ever.
// (A write timeout on the server would also cut a request still waiting on
// a stalled broker.) The server clears the deadline once the answer is
// written, before a keep-alive connection's next request.
func (g *Gateway) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		g.log.Error("cannot encode an answer", "err", err)
		status, b = http.StatusInternalServerError, []byte(`{"code":"internal","message":"the answer could not be encoded; report it"}`)
	}
	b = append(b, '\n')
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(g.cfg.WriteTimeout))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

func (g *Gateway) writeErr(w http.ResponseWriter, e *protocol.Error) {
	switch e.Code {
	case protocol.CodeOverloaded, protocol.CodeRateLimited, protocol.CodeUnavailable:
		w.Header().Set("Retry-After", "1") // seconds; clients should back off further while it repeats
	}
	g.writeJSON(w, e.Code.HTTPStatus(), map[string]string{"code": string(e.Code), "message": e.Message})
}

// constantEq compares a secret in time that tells nothing of it, its
// length included (ConstantTimeCompare returns at once on unequal lengths):
// it compares digests.
func constantEq(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
