package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/groupchat/chatd/protocol"
)

// longestToken is a token of the deployment of at most protocol.MaxTokenLen
// bytes, as long as claims of the issuer's own make it.
func longestToken(t *testing.T, uid string) string {
	t.Helper()
	var tok string
	for pad := 2900; ; pad++ {
		s := signed(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{
			"sub": uid, "exp": time.Now().Add(time.Hour).Unix(), "roles": strings.Repeat("r", pad)})
		if len(s) > protocol.MaxTokenLen {
			if tok == "" {
				t.Fatalf("a token with %d bytes of claims is %d bytes already", pad, len(s))
			}
			return tok
		}
		tok = s
	}
}

// An auth frame holds at most a token of protocol.MaxTokenLen bytes and an
// id of 64, however JSON escapes them: a connection that has not
// authenticated may send no more. A larger frame, whole or still arriving,
// closes the connection at once with 1009 and a reason that says so, rather
// than being read up to the frame limit (about 100 KiB) and held until
// AuthTimeout: anyone may open such connections, up to MaxAuthenticating.
func TestAnAuthFrameOverItsLimitClosesTheConnection(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.AuthTimeout = time.Minute }})
	tok := longestToken(t, "alice")
	r := e.dial(0, "")
	r.send(map[string]any{"op": "auth", "id": strings.Repeat("<", protocol.MaxIDLen), "token": tok}) // < escapes to \u003c
	if f := r.read(); f["op"] != protocol.OpAuthed || f["uid"] != "alice" {
		t.Fatalf("an auth frame with a token of %d bytes and an id of %d escaped: %v, want authed", len(tok), protocol.MaxIDLen, f)
	}
	if f := r.call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("after the longest auth frame: %v", f)
	}

	closed := func(how string, r *raw) {
		t.Helper()
		start := time.Now()
		var err error
		for err == nil {
			var f map[string]any
			if f, err = r.tryRead(5 * time.Second); f["op"] == protocol.OpAuthed {
				t.Fatalf("%s: authed, want the connection closed", how)
			}
		}
		if websocket.CloseStatus(err) != websocket.StatusMessageTooBig || !strings.Contains(err.Error(), "auth frame") {
			t.Fatalf("%s: %v after %v, want close 1009 with a reason naming the auth frame", how, err, time.Since(start))
		}
	}
	r = e.dial(0, "")
	r.send([]byte(`{"op":"auth","token":"` + e.token("alice") + `","pad":"` + strings.Repeat("x", 8<<10) + `"}`))
	closed("an auth frame of 8 KiB", r)

	// A frame that never ends is cut once it passes the limit, not at
	// AuthTimeout.
	r = e.dial(0, "")
	w, err := r.ws.Writer(context.Background(), websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(`{"op":"auth","pad":"` + strings.Repeat("x", 16<<10))); err != nil {
		t.Fatal(err)
	}
	closed("16 KiB of an auth frame that never ends", r)
}

// A token in the URL or a header is held to protocol.MaxTokenLen bytes
// like one in an auth frame: the header limit (64 KiB) would otherwise
// let anyone make the gateway decode and check a token sixteen times the
// size, on every connection and HTTP request. The longest token the auth
// frame takes passes everywhere.
func TestATokenInTheURLOrAHeaderIsHeldToTheAuthFramesLimit(t *testing.T) {
	e := newEnv(t, envOpts{})
	ok := longestToken(t, "alice")
	long := signed(t, jwt.SigningMethodHS256, []byte(testSecret), jwt.MapClaims{
		"sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "roles": strings.Repeat("r", 40<<10)})

	if f := e.dial(0, "?token="+ok).read(); f["op"] != protocol.OpAuthed {
		t.Fatalf("a token of %d bytes in the URL: %v, want authed", len(ok), f)
	}
	if code, ans := e.http("GET", "/v1/sync", ok, nil); code != 200 {
		t.Fatalf("a token of %d bytes in the HTTP API's header: %d %v, want 200", len(ok), code, ans)
	}

	refused := func(how string, f map[string]any) {
		t.Helper()
		msg, _ := f["message"].(string)
		if f["code"] != string(protocol.CodeBadToken) || !strings.Contains(msg, "4096") {
			t.Fatalf("a token of %d bytes %s: %v, want bad_token naming the limit of 4096 bytes", len(long), how, f)
		}
	}
	refused("in the URL", e.dial(0, "?token="+long).read())
	url := "ws" + strings.TrimPrefix(e.gws[0].srv.URL, "http") + "/v1/ws"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + long}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	refused("in the upgrade's header", (&raw{t: t, ws: ws}).read())
	_, ans := e.http("GET", "/v1/sync", long, nil)
	refused("in the HTTP API's header", ans)

	// In the auth frame too, as PROTOCOL.md says: it was "invalid", and
	// an auth frame with no token "invalid" where the table says
	// unauthenticated. Both close with 4001.
	for _, c := range []struct {
		token string
		code  protocol.Code
	}{{strings.Repeat("t", protocol.MaxTokenLen+1), protocol.CodeBadToken}, {"", protocol.CodeUnauthenticated}} {
		r := e.dial(0, "")
		r.send(map[string]any{"op": "auth", "id": "1", "token": c.token})
		f := r.read()
		ce, _, err := r.awaitClose(5 * time.Second)
		if f["code"] != string(c.code) || ce == nil || ce.Code != 4001 {
			t.Errorf("an auth frame with a token of %d bytes: %v, closed by %v; want %s and close 4001", len(c.token), f, err, c.code)
		}
	}
	// Once authenticated, an auth frame is invalid whatever its token: its
	// token's refusal said the connection closed, and it went on.
	r := e.dial(0, "?token="+e.token("alice"))
	r.read() // authed
	for _, token := range []any{nil, strings.Repeat("t", protocol.MaxTokenLen+1), "x"} {
		req := map[string]any{"op": "auth"}
		if token != nil {
			req["token"] = token
		}
		if f := r.call(req); f["code"] != string(protocol.CodeInvalid) || !strings.Contains(fmt.Sprint(f["message"]), "already authenticated") {
			t.Errorf("an auth frame on an authenticated connection, token %.20v: %v; want invalid, already authenticated", token, f)
		}
	}
	if f := r.call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Errorf("after the auth frames: %v; want the connection serving", f)
	}
}
