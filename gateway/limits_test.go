package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// A body within MaxBody is taken however much JSON escapes it (Go's encoder
// writes < as \u003c, six bytes for one), over WebSocket and HTTP; a body
// past MaxBody is refused with a frame naming the request, not a closed
// connection.
func TestABodyWithinTheLimitIsTakenHoweverJSONEscapesIt(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.MaxBody = 4096 }})
	e.group("html", "alice", "bob")
	a := e.login(0, "alice")
	body := strings.Repeat("<b>", 4096/3) // 4,095 bytes, 16,380 escaped
	if f := a.call(map[string]any{"op": "send", "gid": "html", "cmid": "c1", "body": body}); f["op"] != protocol.OpAccepted {
		t.Fatalf("a %d-byte body over WebSocket: %v", len(body), f)
	}
	status, f := e.http("POST", "/v1/groups/html/messages", e.token("alice"), map[string]any{"cmid": "c2", "body": body})
	if status != http.StatusOK || f["op"] != protocol.OpAccepted {
		t.Fatalf("a %d-byte body over HTTP: %d %v", len(body), status, f)
	}
	f = a.call(map[string]any{"op": "send", "gid": "html", "cmid": "c3", "body": body + "<b>"})
	if code(f) != string(protocol.CodeBodyTooLarge) {
		t.Fatalf("a body past the limit: %v, want body_too_large", f)
	}
	if f := a.call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("the connection after a refused body: %v", f)
	}
	// The worst case: every byte escaped to six (the frame limit is six
	// times the body limit and 4 KiB), with the longest id, gid and cmid.
	// A body of the limit is taken; one byte more is refused with
	// body_too_large, its frame still within the frame limit, not with a
	// connection closed.
	long := strings.Repeat("x", protocol.MaxIDLen)
	e.group(strings.Repeat("g", 128), "alice")
	worst := strings.Repeat("<", 4096)
	for _, tc := range []struct {
		body string
		want string
	}{{worst, protocol.OpAccepted}, {worst + "<", string(protocol.CodeBodyTooLarge)}} {
		req := map[string]any{"op": "send", "gid": strings.Repeat("g", 128), "cmid": strings.Repeat("c", 128), "body": tc.body, "pad": long}
		b, _ := json.Marshal(req)
		if f := a.call(req); f["op"] != tc.want && code(f) != tc.want {
			t.Fatalf("a body of %d bytes, %d escaped, in a frame of about %d bytes: %v, want %s", len(tc.body), 6*len(tc.body), len(b), f, tc.want)
		}
	}
	if f := a.call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("the connection after a refused body escaped to six times its size: %v", f)
	}
}

// The authed frame, of an auth frame or of a token in the URL, says how
// long a body the server takes (max_body): a client refuses a longer one
// itself, where its frame past the frame limit would close the connection
// (1009), and every request in flight on it with it.
func TestAuthedSaysTheBodyLimit(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.MaxBody = 4096 }})
	r := e.dial(0, "?token="+e.token("alice"))
	if f := r.read(); f["op"] != protocol.OpAuthed || f["max_body"] != float64(4096) {
		t.Fatalf("authed of a token in the URL: %v, want max_body 4096", f)
	}
	r = e.dial(0, "")
	r.send(map[string]any{"op": "auth", "id": "a1", "token": e.token("alice")})
	if f := r.read(); f["op"] != protocol.OpAuthed || f["id"] != "a1" || f["max_body"] != float64(4096) {
		t.Fatalf("authed of an auth frame: %v, want max_body 4096", f)
	}
}

// The SDK refuses a body over the limit the server announced, at once and
// with the limit, without sending it: a frame of it over the frame limit
// would close the connection with 1009, and every send in flight on it
// would wait for the reconnect.
func TestTheSDKRefusesABodyOverTheLimitWithoutSendingIt(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.MaxBody = 1024 }})
	e.group("g", "alice", "bob")
	a := e.connect(0, "alice", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, size := range []int{1025, 200 << 10} { // within the frame limit (10 KiB) and past it
		_, err := a.c.Send(ctx, "g", strings.Repeat("x", size))
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeBodyTooLarge || !strings.Contains(err.Error(), "1024") {
			t.Fatalf("a body of %d bytes: %v, want body_too_large naming the limit", size, err)
		}
	}
	if st := a.c.Stats(); st.Reconnects != 0 || st.Resends != 0 {
		t.Fatalf("stats %+v: the connection was closed on a body over the limit", st)
	}
	if _, err := a.c.Send(ctx, "g", strings.Repeat("<", 1024)); err != nil {
		t.Fatalf("a body of the limit, escaped to six times it: %v", err)
	}
	if n := e.gws[0].g.Stats().Sends; n != 1 {
		t.Fatalf("%d sends accepted, want the one within the limit", n)
	}
}

// HTTP sends keep the same rate as a connection's: a user cannot go round
// the limit by sending over HTTP.
func TestHTTPSendsAreRateLimited(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.SendRate, c.SendBurst = 1, 2 }})
	e.group("http", "alice", "bob")
	accepted, limited := 0, 0
	for i := range 6 {
		status, f := e.http("POST", "/v1/groups/http/messages", e.token("alice"), map[string]any{"cmid": fmt.Sprint("c", i), "body": "hi"})
		switch {
		case status == http.StatusOK:
			accepted++
		case status == http.StatusTooManyRequests && f["code"] == string(protocol.CodeRateLimited) && strings.Contains(f["message"].(string), "same cmid"):
			limited++
		default:
			t.Fatalf("an HTTP send: %d %v", status, f)
		}
	}
	if accepted != 2 || limited != 4 {
		t.Fatalf("6 HTTP sends at once (1/s, burst 2): %d accepted, %d rate_limited; want 2 and 4", accepted, limited)
	}
	// A refusal to retry says when, as HTTP does.
	req, _ := http.NewRequest("POST", e.gws[0].srv.URL+"/v1/groups/http/messages", strings.NewReader(`{"cmid":"c9","body":"hi"}`))
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("a rate-limited HTTP send: %d, Retry-After %q; want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Another user has a bucket of its own.
	if status, f := e.http("POST", "/v1/groups/http/messages", e.token("bob"), map[string]any{"cmid": "b", "body": "hi"}); status != http.StatusOK {
		t.Fatalf("another user's send: %d %v", status, f)
	}
}

func TestPageCutKeepsThePageNextToItsCursor(t *testing.T) {
	msgs := make([]protocol.Message, 10)
	for i := range msgs {
		msgs[i] = protocol.Message{MsgID: int64(i), Body: strings.Repeat("x", maxPageBytes/4)}
	}
	if got := pageCut(msgs[:4], false); got != nil {
		t.Fatalf("4 bodies of a quarter of the limit cut to %d", len(got))
	}
	after := pageCut(msgs, false)
	if len(after) != 4 || after[0].MsgID != 0 {
		t.Fatalf("a page after a cursor cut to msgids %d..: %d messages, want the oldest 4", after[0].MsgID, len(after))
	}
	before := pageCut(msgs, true)
	if len(before) != 4 || before[3].MsgID != 9 {
		t.Fatalf("a page before a cursor cut to %d messages ending at %d, want the newest 4", len(before), before[len(before)-1].MsgID)
	}
	huge := []protocol.Message{{Body: strings.Repeat("x", 2*maxPageBytes)}, {Body: "y"}}
	if got := pageCut(huge, false); len(got) != 1 {
		t.Fatalf("a page whose first body is past the limit cut to %d messages, want that one", len(got))
	}
}

func TestOutQueueBoundsItsBytes(t *testing.T) {
	q := outQueue{limit: 100, maxB: 10, writing: true} // no writer: items stay queued
	if !q.put(out{frame: make([]byte, 20)}, nil) {
		t.Fatal("an item past the bound refused from an empty queue; one always fits")
	}
	q = outQueue{limit: 100, maxB: 10, writing: true}
	if !q.put(out{frame: make([]byte, 6)}, nil) || !q.put(out{msgs: [][]byte{make([]byte, 4)}}, nil) {
		t.Fatal("10 bytes refused by a bound of 10")
	}
	if q.put(out{ctl: []byte{1}}, nil) {
		t.Fatal("an 11th byte taken by a bound of 10")
	}
}

// What the writer is writing still counts against the byte bound until it
// is written: a connection holds at most QueueBytes of outbound items (or
// one item, whatever its size, when it holds nothing else), not a full
// queue more behind a batch being written.
func TestOutQueueCountsTheBatchBeingWritten(t *testing.T) {
	q := outQueue{limit: 100, maxB: 10}
	taken, release := make(chan int, 10), make(chan struct{})
	write := func(items []out) bool {
		n := 0
		for i := range items {
			n += items[i].size()
		}
		taken <- n
		<-release
		return true
	}
	if !q.put(out{frame: make([]byte, 8)}, write) {
		t.Fatal("8 bytes refused from an empty queue")
	}
	if n := <-taken; n != 8 {
		t.Fatalf("the writer took %d bytes, want 8", n)
	}
	if q.put(out{frame: make([]byte, 8)}, write) {
		t.Fatal("8 bytes queued while the writer writes 8: 16 bytes held under a bound of 10")
	}
	if !q.put(out{frame: make([]byte, 2)}, write) {
		t.Fatal("2 bytes refused beside the 8 being written, under a bound of 10")
	}
	close(release)
	if n := <-taken; n != 2 {
		t.Fatalf("the writer took %d bytes next, want 2", n)
	}
	q.wg.Wait()
	if !q.put(out{frame: make([]byte, 10)}, write) {
		t.Fatal("10 bytes refused once everything was written")
	}
	q.stop()
}

// Shutdown closes connections still authenticating too, and one that
// authenticates as it begins: neither holds it up until its deadline.
func TestShutdownClosesConnectionsStillAuthenticating(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.AuthTimeout = time.Minute }})
	silent := e.dial(0, "")
	late := e.dial(0, "")
	time.Sleep(50 * time.Millisecond) // both are waiting for their auth frame
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- e.gws[0].g.Shutdown(ctx)
	}()
	_ = late.ws.Write(context.Background(), websocket.MessageText, []byte(`{"op":"auth","token":"`+e.token("alice")+`"}`))
	for _, r := range []*raw{silent, late} {
		for {
			_, err := r.tryRead(10 * time.Second)
			if err == nil {
				continue // authed, before the close
			}
			if s := websocket.CloseStatus(err); s != websocket.StatusGoingAway {
				t.Fatalf("a connection at shutdown ended with %v (%d), want 1001 going away", err, s)
			}
			break
		}
	}
	if err := <-done; err != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("Shutdown: %v after %v", err, time.Since(start))
	}
}

// One user's token opens at most MaxConnsPerUser connections to a gateway:
// past it a connection, by URL token or by auth frame, is refused with
// rate_limited and closed with 4029 before it is served, other users are
// not, and a connection closed makes room for a new one.
func TestAUserHasAtMostMaxConnsPerUserConnections(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.MaxConnsPerUser = 3 }})
	var held []*raw
	for range 3 {
		held = append(held, e.login(0, "alice"))
	}
	refused := func(how string, r *raw, id string) {
		t.Helper()
		f, err := r.tryRead(5 * time.Second)
		if got, _ := f["id"].(string); err != nil || code(f) != string(protocol.CodeRateLimited) || got != id || !strings.Contains(f["message"].(string), "close one") {
			t.Fatalf("a 4th connection of alice (%s): %v %v, want rate_limited saying what to do", how, f, err)
		}
		if _, err := r.tryRead(5 * time.Second); websocket.CloseStatus(err) != CloseTooManyConns {
			t.Fatalf("a 4th connection of alice (%s): %v, want close %d", how, err, CloseTooManyConns)
		}
	}
	refused("token in the URL", e.dial(0, "?token="+e.token("alice")), "")
	r := e.dial(0, "")
	r.send(map[string]any{"op": "auth", "id": "a1", "token": e.token("alice")})
	refused("auth frame", r, "a1")

	if f := e.login(0, "bob").call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("bob beside alice's connections: %v", f)
	}
	if f := held[0].call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("alice's first connection after the refusals: %v", f)
	}
	held[0].ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "a connection of alice in place of the closed one", 5*time.Second, func() bool {
		r := e.dial(0, "?token="+e.token("alice"))
		defer r.ws.CloseNow()
		f, err := r.tryRead(5 * time.Second)
		return err == nil && f["op"] == protocol.OpAuthed
	})
}
