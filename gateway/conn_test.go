package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// TestFrameSentWithTheUpgrade: a client that sends its first frame in the
// same packet as the upgrade request (before the 101) is served: the bytes
// net/http read ahead are handed to the connection, not lost.
func TestFrameSentWithTheUpgrade(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1})
	e.group("g", "early")
	nc, err := net.Dial("tcp", strings.TrimPrefix(e.gws[0].srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	auth, _ := json.Marshal(map[string]string{"op": "auth", "id": "1", "token": e.token("early")})
	req := "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := nc.Write(append([]byte(req), frame(auth)...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %v, %v", resp, err)
	}
	_, f, err := serverFrame(br)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(f, &got); err != nil || got["op"] != "authed" || got["uid"] != "early" {
		t.Fatalf("first frame %s (%v); want authed as early", f, err)
	}
}

// TestPingsAndPongs: the gateway pings every PingInterval and answers a
// client's ping with its payload, while an idle connection waits outside
// the WebSocket's read (its goroutine keeps the smallest stack); a client
// that answers pings stays, one that does not is closed with 1008.
func TestPingsAndPongs(t *testing.T) {
	const interval = 300 * time.Millisecond
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.PingInterval = interval }})
	answering, silent := e.wire(0, "answering"), e.wire(0, "silent")
	answering.c.Write(clientFrame(0x89, []byte("are you there")))

	// The answering client reads for four intervals, answering each ping.
	pings, pong := 0, ""
	answering.c.SetReadDeadline(time.Now().Add(4 * interval))
	for {
		b0, p, err := serverFrame(answering.rd)
		if err != nil {
			break
		}
		switch b0 {
		case 0x89:
			pings++
			answering.c.Write(clientFrame(0x8a, p))
		case 0x8a:
			pong = string(p)
		default:
			t.Fatalf("an idle connection got frame %x %q", b0, p)
		}
	}
	if pong != "are you there" {
		t.Fatalf("a client's ping was answered with %q, want its payload", pong)
	}
	if pings < 3 {
		t.Fatalf("%d pings in %v, every %v", pings, 4*interval, interval)
	}

	// The answering one is idle now (the silent one was cut after two
	// intervals): it waits, and not in the WebSocket's read.
	stacks := make([]byte, 1<<22)
	stacks = stacks[:runtime.Stack(stacks, true)]
	if n := bytes.Count(stacks, []byte("gateway.(*conn).awaitFrame(")); n != 1 {
		t.Errorf("%d connections wait in awaitFrame, want 1", n)
	}
	if bytes.Contains(stacks, []byte("websocket.(*Conn).Read(")) {
		t.Errorf("an idle connection waits in the WebSocket's read:\n%s", stacks)
	}

	// The answering one is still served; the silent one was closed.
	answering.c.Write(frame([]byte(`{"op":"sync","id":"s"}`)))
	if f := answering.read(); f["op"] != "synced" {
		t.Fatalf("after answering pings: %v", f)
	}
	_, err := silent.tryRead(5 * time.Second)
	if want := fmt.Sprintf("closed by the server: %04x", int(websocket.StatusPolicyViolation)); err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "no pong") {
		t.Fatalf("a client that answers no ping: %v, want %s ... no pong", err, want)
	}
}

// TestAFreshConnectionIsNotCutByAPingAsItRegisters: a ping that comes
// while a connection registers (its presence written to Redis) finds it
// heard from: no connection is cut for a pong it could not have sent yet.
// With a ping tick every 8 ms and a registration taking a Redis round
// trip, some of the logins register across a tick.
func TestAFreshConnectionIsNotCutByAPingAsItRegisters(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.PingInterval = 80 * time.Millisecond }})
	for i := range 120 {
		r := e.login(0, fmt.Sprintf("fresh%d", i))
		if f := r.call(map[string]any{"op": "sync"}); f["op"] != "synced" {
			t.Fatalf("connection %d, right after its login: %v", i, f)
		}
		r.ws.CloseNow()
	}
}

// TestAPingIntoAFullQueueIsSkipped: a ping never cuts a client as too slow
// (only pushes and answers do); one that finds the outbound queue full is
// skipped, and no pong is owed for it.
func TestAPingIntoAFullQueueIsSkipped(t *testing.T) {
	c := &conn{queue: outQueue{limit: 1, writing: true, items: []out{{frame: []byte("a push")}}}}
	c.heard.Store(true)
	for range 3 {
		c.ping()
	}
	if len(c.queue.items) != 1 || c.asked.Load() || !c.heard.Load() {
		t.Fatalf("pings into a full queue: %d items queued, close asked %v, heard %v; want 1, false, true",
			len(c.queue.items), c.asked.Load(), c.heard.Load())
	}
}

// TestAPingFloodIsAnsweredAtTheFrameRate: pings count against the frame
// rate; past it they go unanswered, and the connection is still served.
func TestAPingFloodIsAnsweredAtTheFrameRate(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.SendRate, c.SendBurst = 20, 10 }})
	w := e.wire(0, "pinger")
	const n = 1000
	var flood []byte
	for i := range n {
		flood = append(flood, clientFrame(0x89, []byte(fmt.Sprint(i)))...)
	}
	start := time.Now()
	w.c.Write(flood)
	w.c.Write(frame([]byte(`{"op":"sync","id":"after"}`)))
	pongs := 0
	w.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		b0, p, err := serverFrame(w.rd)
		if err != nil {
			t.Fatalf("after a ping flood: %v (%d pongs)", err, pongs)
		}
		if b0 == 0x8a {
			pongs++
			continue
		}
		if !strings.Contains(string(p), `"after"`) {
			t.Fatalf("after a ping flood: %s", p)
		}
		break
	}
	// The frame rate is 100/s with a burst of 40 here.
	if most := 40 + int(100*time.Since(start).Seconds()) + 1; pongs == 0 || pongs > most {
		t.Fatalf("%d pings answered with %d pongs in %v; want 1 to %d", n, pongs, time.Since(start), most)
	}
}

// TestShutdownAnswersTheSendsItTook: connections closed by Shutdown while
// their sends are being produced get the answers to those sends before the
// close frame: every message produced is one its sender learns the msgid of.
func TestShutdownAnswersTheSendsItTook(t *testing.T) {
	e := newEnv(t, envOpts{})
	const n = 20
	var uids []string
	for i := range n {
		uids = append(uids, fmt.Sprint("u", i))
	}
	e.group("g1", uids...)
	var rs []*raw
	for _, u := range uids {
		rs = append(rs, e.login(0, u))
	}
	before := e.topicEndsOf(topics.Messages)
	for i, r := range rs {
		r.send(map[string]any{"op": "send", "id": "s", "gid": "g1", "cmid": fmt.Sprint("c", i), "body": "at shutdown"})
	}
	time.Sleep(2 * time.Millisecond) // the frames have arrived; the sends are being produced
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.gws[0].g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	answered := 0
	for _, r := range rs {
		for {
			f, err := r.tryRead(5 * time.Second)
			if err != nil {
				break // the close frame
			}
			if f["op"] == "accepted" {
				answered++
			}
		}
	}
	if produced := e.topicEndsOf(topics.Messages) - before; int64(answered) != produced {
		t.Fatalf("%d sends produced at shutdown, %d of them answered: the others' senders were cut without their msgid", produced, answered)
	}
}

// TestASlowRequestDoesNotCutAClientThatPongs: a client whose request takes
// longer than the ping interval is not cut for the pongs that wait unread
// behind it. Here the request is a resend waiting (up to 2 s) for its first
// send in flight; a send while the broker stalls takes up to 3 x 10 s.
func TestASlowRequestDoesNotCutAClientThatPongs(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.PingInterval = 400 * time.Millisecond }})
	e.group("g1", "alice")
	alice := e.login(0, "alice")
	// The first send of cmid c1 is in flight (claimed, not finished).
	if c, err := e.redis.BeginSend(context.Background(), "g1", "alice", "c1", time.Minute, nil); err != nil || c.State != store.SendClaimed {
		t.Fatalf("claim: %+v %v", c, err)
	}
	alice.send(map[string]any{"op": "send", "id": "r", "gid": "g1", "cmid": "c1", "body": "resent"})
	alice.send(map[string]any{"op": "sync", "id": "after"})
	start := time.Now()
	for answered := 0; answered < 2; {
		f, err := alice.tryRead(10 * time.Second) // reading: the client library answers pings
		if err != nil {
			t.Fatalf("after %v, waiting for the answers to the resend and the sync after it: %v", time.Since(start).Round(time.Millisecond), err)
		}
		if f["id"] == "r" || f["id"] == "after" {
			answered++
		}
	}
}

// TestABinaryFloodIsHeldToTheFrameRate: binary frames count against the
// frame rate as text frames and pings do: past it, a flood of them is
// refused as rate_limited, not handled (a goroutine and an answer each).
func TestABinaryFloodIsHeldToTheFrameRate(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.SendRate, c.SendBurst = 20, 10 }})
	w := e.wire(0, "flooder")
	const n = 300 // fewer than the queue's 512 answers
	var flood []byte
	for range n {
		flood = append(flood, clientFrame(0x82, []byte("x"))...)
	}
	start := time.Now()
	w.c.Write(flood)
	handled := 0
	w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for got := 0; got < n; got++ {
		_, p, err := serverFrame(w.rd)
		if err != nil {
			t.Fatalf("after %d answers: %v", got, err)
		}
		var f map[string]any
		json.Unmarshal(p, &f)
		if code(f) != string(protocol.CodeRateLimited) {
			handled++
		}
	}
	// The frame rate is 100/s with a burst of 40 here.
	if most := 40 + int(100*time.Since(start).Seconds()) + 1; handled > most {
		t.Fatalf("%d binary frames in %v: %d handled (answered bad_frame) within the frame rate; want at most %d",
			n, time.Since(start).Round(time.Millisecond), handled, most)
	}
}

// A user who reconnects to the same gateway while their old connection is
// being let go stays online: the old connection's clearing of their
// presence must not land after the new one's registration and win.
func TestAReconnectRacingTheOldConnectionsEndStaysOnline(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	e.reconnectDuringTheEnd("alice", nil)
	// The old connection leaves the count after its presence work.
	waitFor(t, "the old connection to be let go", 5*time.Second, func() bool { return e.gws[0].g.Stats().Conns == 1 })
	nodes, err := e.redis.OnlineNodes(context.Background(), []string{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes["alice"]) != 1 {
		t.Fatalf("alice reconnected and is online on %v; want this gateway: pushes miss her until the next refresh", nodes["alice"])
	}
}

// reconnectDuringTheEnd logs uid in and closes the connection; while the
// gateway lets it go, before it clears uid's presence, uid connects again
// and the new connection's presence is set; then atRegistered runs, if
// given. It returns the new connection once the old one's end has come
// past that point.
func (e *env) reconnectDuringTheEnd(uid string, atRegistered func(fresh *raw)) *raw {
	e.t.Helper()
	old := e.login(0, uid)
	var fresh *raw
	registered := make(chan struct{})
	e.gws[0].g.beforeOffline = func(u string) {
		if u != uid || fresh != nil {
			return
		}
		fresh = e.login(0, uid)
		// A connection is counted once its presence is set: the new one's
		// is set before the old one's is cleared.
		waitFor(e.t, "the new connection's presence", 5*time.Second, func() bool { return e.gws[0].g.Stats().Conns == 2 })
		if atRegistered != nil {
			atRegistered(fresh)
		}
		close(registered)
	}
	old.ws.Close(websocket.StatusNormalClosure, "")
	<-registered
	return fresh
}

// A close reason is cut to fit a control frame at a character boundary:
// RFC 6455 has a client fail a connection whose close reason is not UTF-8
// (a browser then sees 1006 and no reason), and a refusal may quote what
// the client sent.
func TestACloseReasonCutShortIsStillUTF8(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1})
	r := e.dial(0, "")
	r.send([]byte(`{"op":"x` + strings.Repeat("é", 60) + `"}`))
	if f := r.read(); f["code"] != string(protocol.CodeUnknownOp) {
		t.Fatalf("first frame of an unknown op: %v", f)
	}
	_, _, err := r.ws.Read(context.Background())
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != CloseUnauthenticated {
		t.Fatalf("read after the refusal: %v; want a close with %d", err, CloseUnauthenticated)
	}
	if !utf8.ValidString(ce.Reason) || !strings.HasPrefix(ce.Reason, "unknown_op: unknown op") || len(ce.Reason) > 123 {
		t.Fatalf("close reason %q (%d bytes): want the refusal, cut to valid UTF-8 of at most 123 bytes", ce.Reason, len(ce.Reason))
	}
}

// An auth frame read just as the time to authenticate runs out: the
// timeout has answered, and its close, 4001 with what was wrong, is the
// one the client gets, not the normal close (1000) of the connection's end
// racing it.
func TestAnAuthFrameAsTheTimeRunsOutGetsTheTimeoutsClose(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1, tune: func(c *Config) { c.AuthTimeout = 300 * time.Millisecond }})
	timedOut, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.gws[0].g.authTimedOut = func() {
		once.Do(func() { close(timedOut) })
		<-release
	}
	r := e.dial(0, "")
	<-timedOut
	r.send(map[string]any{"op": "auth", "token": e.token("alice")}) // read while the timeout answers
	time.Sleep(300 * time.Millisecond)                              // the read returns meanwhile
	close(release)
	var err error
	for err == nil {
		_, err = r.tryRead(5 * time.Second)
	}
	if websocket.CloseStatus(err) != CloseUnauthenticated {
		t.Fatalf("close %v, want %d (the timeout's)", err, CloseUnauthenticated)
	}
}
