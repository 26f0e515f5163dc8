package gateway

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// get asks the first gateway's HTTP API for path with a user's token and
// returns the answer, its body closed, and the body's JSON.
func (e *env) get(path, tok string) (*http.Response, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.gws[0].srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var f map[string]any
	json.NewDecoder(resp.Body).Decode(&f)
	return resp, f
}

// One user's HTTP requests, whatever their operation, are held to the
// frame rate of one WebSocket connection: past it they are refused with
// 429 rate_limited and Retry-After, as sends past the send rate are, so
// that a token does not ask the stores as fast as the server answers.
// Another user is not held back by it.
func TestHTTPRequestsOfAUserAreHeldToTheFrameRate(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.SendRate, c.SendBurst = 20, 10 }})
	e.group("g", "alice", "bob")
	rate, burst := (&conn{g: e.gws[0].g}).frameRate() // 100 a second, bursts of 40
	tok := e.token("alice")
	answered, limited := 0, 0
	start := time.Now()
	for range 200 {
		switch resp, f := e.get("/v1/sync", tok); resp.StatusCode {
		case http.StatusOK:
			answered++
		case http.StatusTooManyRequests:
			if code(f) != string(protocol.CodeRateLimited) || resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("a sync refused 429: %v, Retry-After %q; want rate_limited and 1", f, resp.Header.Get("Retry-After"))
			}
			limited++
		default:
			t.Fatalf("a sync over HTTP: %d %v", resp.StatusCode, f)
		}
	}
	elapsed := time.Since(start)
	if most := burst + int(rate*elapsed.Seconds()) + 1; limited == 0 || answered > most {
		t.Fatalf("200 syncs of alice over HTTP in %v: %d answered, %d refused 429; want at most %d answered (%.0f a second, bursts of %d)",
			elapsed.Round(time.Millisecond), answered, limited, most, rate, burst)
	}
	if status, f := e.http("GET", "/v1/sync", e.token("bob"), nil); status != http.StatusOK {
		t.Fatalf("bob's sync beside alice's: %d %v", status, f)
	}
	time.Sleep(time.Second) // the bucket refills
	if status, f := e.http("GET", "/v1/sync", tok, nil); status != http.StatusOK {
		t.Fatalf("alice's sync a second later: %d %v", status, f)
	}
}

// A user has at most maxHTTPInflight HTTP requests in hand at once: past
// that (requests whose bodies come slowly, or that wait on a stalled
// store) the next is refused at once with 429 rate_limited, and served
// again once those are done.
func TestHTTPRequestsOfAUserInFlightAreCapped(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1})
	e.group("g", "alice", "bob")
	tok := e.token("alice")
	var held []net.Conn
	for range maxHTTPInflight {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.gws[0].srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// The body never comes whole: the request is in hand until the
		// connection closes.
		fmt.Fprintf(c, "POST /v1/groups/g/read HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Length: 12\r\n\r\n{\"upto\"", tok)
		held = append(held, c)
	}
	waitFor(t, fmt.Sprintf("the gateway to hold alice's %d requests", maxHTTPInflight), 10*time.Second, func() bool {
		h := &e.gws[0].g.httpUsers
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.inflight["alice"] == maxHTTPInflight
	})
	status, last := e.http("GET", "/v1/sync", tok, nil)
	if status != http.StatusTooManyRequests {
		t.Fatalf("a request of alice beside her %d in hand: %d %v; want 429", maxHTTPInflight, status, last)
	}
	if code(last) != string(protocol.CodeRateLimited) || !strings.Contains(last["message"].(string), "at once") {
		t.Fatalf("a request past those in hand: %v, want rate_limited saying how many at once", last)
	}
	if status, f := e.http("GET", "/v1/sync", e.token("bob"), nil); status != http.StatusOK {
		t.Fatalf("bob's sync beside alice's requests: %d %v", status, f)
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "alice served again once her requests ended", 5*time.Second, func() bool {
		status, _ := e.http("GET", "/v1/sync", tok, nil)
		return status == http.StatusOK
	})
}

// The users' buckets are at most maxUserBuckets, however many users come
// within the time a bucket takes to refill: past it one is let go for each
// new one.
func TestUserBucketsHoldAtMostMaxUserBuckets(t *testing.T) {
	var u userBuckets
	const rate, burst = 10.0, 5
	for i := range 2 * maxUserBuckets {
		u.takeAt(fmt.Sprint("u", i), 1, rate, burst) // all at once: none is full again
	}
	if n := len(u.m); n > maxUserBuckets {
		t.Fatalf("%d users at once: %d buckets held, want at most %d", 2*maxUserBuckets, n, maxUserBuckets)
	}
}
