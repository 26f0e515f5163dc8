package gateway

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/groupchat/chatd/protocol"
)

// A token whose exp is further away than the cap (30 days by default) is
// refused as bad_token, saying what to do, over WebSocket (URL or auth
// frame) and HTTP; a token within it is taken. A token with exp in 2100
// was taken: one leak was a login for life.
func TestATokenLivingPastTheCapIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1})
	signed := func(exp time.Time) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{Subject: "alice", ExpiresAt: jwt.NewNumericDate(exp)}).SignedString([]byte(testSecret))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	forever := signed(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	refused := func(how string, r *raw, id string) {
		t.Helper()
		f, err := r.tryRead(5 * time.Second)
		if got, _ := f["id"].(string); err != nil || code(f) != string(protocol.CodeBadToken) || got != id || !strings.Contains(f["message"].(string), "shorter life") {
			t.Fatalf("a token valid until 2100 (%s): %v %v, want bad_token saying to issue shorter-lived tokens", how, f, err)
		}
		if _, err := r.tryRead(5 * time.Second); websocket.CloseStatus(err) != CloseUnauthenticated {
			t.Fatalf("a token valid until 2100 (%s): %v, want close %d", how, err, CloseUnauthenticated)
		}
	}
	refused("in the URL", e.dial(0, "?token="+forever), "")
	r := e.dial(0, "")
	r.send(map[string]any{"op": "auth", "id": "a1", "token": forever})
	refused("auth frame", r, "a1")
	if st, f := e.http("GET", "/v1/sync", forever, nil); st != http.StatusUnauthorized || f["code"] != string(protocol.CodeBadToken) {
		t.Fatalf("a token valid until 2100 over HTTP: %d %v, want 401 bad_token", st, f)
	}

	within := signed(time.Now().Add(DefaultMaxTokenTTL))
	if f := e.dial(0, "?token="+within).read(); f["op"] != protocol.OpAuthed {
		t.Fatalf("a token valid for the whole cap: %v, want authed", f)
	}
	if st, f := e.http("GET", "/v1/sync", within, nil); st != http.StatusOK {
		t.Fatalf("a token valid for the whole cap over HTTP: %d %v", st, f)
	}
}

// A gateway holds at most MaxAuthenticating connections that have not
// authenticated: past it an upgrade is refused with 503 and the API's
// JSON error (overloaded, retry later), and counted; a connection that
// authenticates makes room. Anyone could hold any number of them, without
// a token, for AuthTimeout each.
func TestConnectionsStillAuthenticatingAreCapped(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.MaxAuthenticating, c.AuthTimeout = 3, time.Minute }})
	var silent []*raw
	for range 3 {
		silent = append(silent, e.dial(0, ""))
	}
	url := "ws" + strings.TrimPrefix(e.gws[0].srv.URL, "http") + "/v1/ws"
	dial := func() (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return websocket.Dial(ctx, url+"?token="+e.token("alice"), nil)
	}
	ws, resp, err := dial()
	if err == nil {
		ws.CloseNow()
		t.Fatal("a 4th connection upgraded while 3 were authenticating, the most the gateway takes")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a 4th connection while 3 authenticate: %v %v, want 503 with Retry-After", resp, err)
	}
	var body map[string]string
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if body["code"] != string(protocol.CodeOverloaded) || !strings.Contains(body["message"], "retry") {
		t.Fatalf("the refusal's body: %v, want overloaded saying to retry", body)
	}
	if n := e.gws[0].g.Stats().AuthRefused; n != 1 {
		t.Fatalf("refusals counted: %d, want 1", n)
	}

	silent[0].send(map[string]any{"op": "auth", "id": "a1", "token": e.token("bob")})
	if f := silent[0].read(); f["op"] != protocol.OpAuthed {
		t.Fatalf("bob's auth frame: %v", f)
	}
	waitFor(t, "room for a connection once one authenticated", 5*time.Second, func() bool {
		ws, _, err := dial()
		if err != nil {
			return false
		}
		ws.CloseNow()
		return true
	})
}

// The send rate is the user's on a gateway, not each connection's: their
// connections and their HTTP sends share one bucket. Each connection had
// its own, so a user sent MaxConnsPerUser times the rate.
func TestTheSendRateIsPerUserAcrossConnectionsAndHTTP(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.SendRate, c.SendBurst = 0.01, 2 }})
	e.group("rate", "alice", "bob")
	a1, a2 := e.login(0, "alice"), e.login(0, "alice")
	send := func(r *raw, cmid string) string {
		f := r.call(map[string]any{"op": "send", "gid": "rate", "cmid": cmid, "body": "hi"})
		if f["op"] == protocol.OpAccepted {
			return "accepted"
		}
		return code(f)
	}
	got := []string{send(a1, "c1"), send(a2, "c2"), send(a1, "c3"), send(a2, "c4")}
	if want := "accepted accepted rate_limited rate_limited"; strings.Join(got, " ") != want {
		t.Fatalf("alice's sends, by turns on two connections (burst 2): %v, want %s", got, want)
	}
	if st, f := e.http("POST", "/v1/groups/rate/messages", e.token("alice"), map[string]any{"cmid": "c5", "body": "hi"}); st != http.StatusTooManyRequests {
		t.Fatalf("alice's HTTP send after her connections spent her burst: %d %v, want 429", st, f)
	}
	if got := send(e.login(0, "bob"), "b1"); got != "accepted" {
		t.Fatalf("bob's send beside alice's: %s", got)
	}
}

// A cap as long as a duration holds takes every token: adding the clock
// skew to it used to wrap around and refuse them all.
func TestTheLongestTokenCapTakesTokens(t *testing.T) {
	tok, err := IssueToken([]byte(testSecret), "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if uid, perr := verify([]byte(testSecret), tok, time.Duration(math.MaxInt64)); perr != nil || uid != "alice" {
		t.Fatalf("a token of an hour under the longest cap: %q, %v; want alice", uid, perr)
	}
}

// A browser page may connect from the gateway's own host or from a host
// CHAT_ALLOWED_ORIGINS names; a page of any other origin is refused, with
// the API's JSON error saying what its operator sets, not the WebSocket
// library's bare 403. A client that is no browser sends no Origin.
func TestBrowserPagesConnectOnlyFromAllowedOrigins(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.AllowedOrigins = []string{"*.chat.example.com"} }})
	base := strings.TrimPrefix(e.gws[0].srv.URL, "http://")
	url := "ws://" + base + "/v1/ws?token=" + e.token("alice")
	for origin, ok := range map[string]bool{
		"":                             true,
		"http://" + base:               true,
		"https://app.chat.example.com": true,
		"https://APP.Chat.Example.com": true,
		"https://evil.example.net":     false,
		"https://chat.example.com":     false, // the pattern wants a subdomain
		"not a url":                    false,
		"null":                         false, // a file or a sandbox: "*" alone takes it
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
		cancel()
		if ok {
			if err != nil {
				t.Errorf("origin %q: %v; want the upgrade", origin, err)
				continue
			}
			ws.CloseNow()
			continue
		}
		if err == nil {
			ws.CloseNow()
			t.Errorf("origin %q: upgraded; want it refused", origin)
			continue
		}
		var body map[string]any
		if resp != nil {
			json.NewDecoder(resp.Body).Decode(&body)
		}
		if msg, _ := body["message"].(string); resp == nil || resp.StatusCode != http.StatusForbidden || body["code"] != "forbidden" || !strings.Contains(msg, "CHAT_ALLOWED_ORIGINS") {
			t.Errorf("origin %q: %v, %v; want 403 forbidden naming CHAT_ALLOWED_ORIGINS", origin, resp, body)
		}
	}
	// Over TLS served here, a page of the gateway's own host served over
	// plain http is refused, saying to load it over https; its https page
	// connects.
	for origin, ok := range map[string]bool{"https://" + base: true, "http://" + base: false, "HTTPS://" + base: true} {
		r := httptest.NewRequest("GET", "https://"+base+"/v1/ws?token="+e.token("alice"), nil)
		r.Header.Set("Origin", origin)
		w := httptest.NewRecorder()
		e.gws[0].g.Handler().ServeHTTP(w, r)
		// Past the origin the upgrade fails on the recorder, which cannot
		// be hijacked: the origin check answers 403.
		if refused := w.Code == http.StatusForbidden; refused == ok {
			t.Errorf("origin %q over TLS: %d %s; want it allowed %v", origin, w.Code, strings.TrimSpace(w.Body.String()), ok)
		}
		if !ok && !strings.Contains(w.Body.String(), "load the page from https://"+base) {
			t.Errorf("origin %q over TLS: %s; want it told to load the page over https", origin, w.Body.String())
		}
	}
	// With "*", as the WebSocket library has it, an origin of no host too.
	req := httptest.NewRequest("GET", "/v1/ws", nil)
	req.Header.Set("Origin", "null")
	if _, ok := allowedOrigin(req, []string{"*"}); !ok {
		t.Error(`origin "null" with the pattern "*": refused; want it taken, as the WebSocket library takes it`)
	}
}
