package gateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/groupchat/chatd/protocol"
)

// wire is a WebSocket client written by hand, byte by byte, for what a
// library client will not do: frames sent slowly or left half written.
type wire struct {
	t  testing.TB
	c  net.Conn
	rd *bufio.Reader
}

func (e *env) wire(gwi int, uid string) *wire {
	e.t.Helper()
	w := dialWire(e.t, strings.TrimPrefix(e.gws[gwi].srv.URL, "http://"), e.token(uid))
	e.t.Cleanup(func() { w.c.Close() })
	return w
}

// dialWire upgrades a TCP connection to host's /v1/ws with token and reads
// the authed frame.
func dialWire(t testing.TB, host, token string) *wire {
	t.Helper()
	c, err := net.DialTimeout("tcp", host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 16)
	rand.Read(key)
	fmt.Fprintf(c, "GET /v1/ws?token=%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		token, host, base64.StdEncoding.EncodeToString(key))
	w := &wire{t: t, c: c, rd: bufio.NewReader(c)}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(w.rd, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		c.Close()
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if f := w.read(); f["op"] != protocol.OpAuthed {
		c.Close()
		t.Fatalf("login over the wire: %v", f)
	}
	return w
}

// frame encodes a masked client text frame.
func frame(payload []byte) []byte { return clientFrame(0x81, payload) }

// clientFrame encodes a masked client frame (RFC 6455 5.2) whose first
// byte, FIN and opcode, is b0.
func clientFrame(b0 byte, payload []byte) []byte {
	b := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	mask := []byte{1, 2, 3, 4}
	b = append(b, mask...)
	for i, c := range payload {
		b = append(b, c^mask[i%4])
	}
	return b
}

// serverFrame reads one unmasked frame: its first byte (FIN and opcode)
// and its payload.
func serverFrame(r io.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(l[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return h[0], p, nil
}

// read returns the next text frame from the server as JSON, skipping
// control frames; it fails the test on a close or after 5 s.
func (w *wire) read() map[string]any {
	w.t.Helper()
	f, err := w.tryRead(5 * time.Second)
	if err != nil {
		w.t.Fatalf("wire read: %v", err)
	}
	return f
}

func (w *wire) tryRead(d time.Duration) (map[string]any, error) {
	w.c.SetReadDeadline(time.Now().Add(d))
	for {
		b0, p, err := serverFrame(w.rd)
		if err != nil {
			return nil, err
		}
		switch b0 & 0x0f {
		case 0x8:
			return nil, fmt.Errorf("closed by the server: %x %q", p[:min(2, len(p))], p[min(2, len(p)):])
		case 0x1:
			var f map[string]any
			return f, json.Unmarshal(p, &f)
		}
	}
}

// victim is a member who keeps receiving a steady stream of messages from
// a sender on the same gateway while the hostile clients do their worst;
// both are SDK clients. stop returns what was sent.
type victim struct {
	m, sender *member
	stop      func() []int64
}

func (e *env) startVictim(gid, uid, sender string) *victim {
	e.t.Helper()
	m := e.connect(1, uid, nil)
	s := e.connect(1, sender, nil)
	// Stopping lets a send in flight finish: one cancelled after the
	// server took it would be delivered without being in sent.
	var stopped atomic.Bool
	var wg sync.WaitGroup
	var sent []int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stopped.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			id, err := s.c.Send(ctx, gid, "steady")
			cancel()
			if err != nil {
				e.t.Errorf("the victim's sender: %v", err)
				return
			}
			sent = append(sent, id)
			time.Sleep(100 * time.Millisecond) // within the send rate
		}
	}()
	stop := func() []int64 { stopped.Store(true); wg.Wait(); return sent }
	e.t.Cleanup(func() { stop() })
	return &victim{m: m, sender: s, stop: stop}
}

// Against a running gateway: floods, slow and stalled writers, a silent
// connection, binary frames, replayed and forged tokens and reads of other
// groups each get their documented error or close, while a member on the
// same gateway keeps getting every message, in order, and the gateway
// still serves.
func TestHostileClientsGetTheirErrorsAndOthersAreUnaffected(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 2, tune: func(c *Config) {
		c.SendRate, c.SendBurst = 20, 10
		c.PingInterval = 5 * time.Second
		c.AuthTimeout = 500 * time.Millisecond
	}})
	e.group("g1", "alice", "bob", "victim", "sender")
	e.group("secret", "carol")
	e.group("flood", "bob")
	time.Sleep(100 * time.Millisecond)
	v := e.startVictim("g1", "victim", "sender")

	{ // frame flood
		a := e.login(1, "alice")
		const n = 600
		go func() { // written while the answers are read, as a flooder that reads
			for i := 0; i < n; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				a.ws.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"op":"sync","id":"%d"}`, i)))
				cancel()
			}
		}()
		// Over the frame rate each frame is refused; a flooder whose
		// answers pile up past the outbound queue is cut as too slow.
		limited, synced := 0, 0
		var cut error
		for limited+synced < n {
			f, err := a.tryRead(10 * time.Second)
			if err != nil {
				cut = err
				break
			}
			switch {
			case f["op"] == protocol.OpSynced:
				synced++
			case code(f) == string(protocol.CodeRateLimited) && f["message"] != "":
				limited++
			}
		}
		if synced == 0 || limited == 0 && cut == nil {
			t.Fatalf("a flood of %d frames: %d refused as rate_limited, %d served, cut: %v", n, limited, synced, cut)
		}
		if cut != nil {
			if websocket.CloseStatus(cut) != CloseTooSlow {
				t.Fatalf("the flooder's connection ended with %v, want close %d", cut, CloseTooSlow)
			}
			a = e.login(1, "alice")
		}
		// The limiter refills: the flooder is served again.
		waitFor(t, "a sync served after the flood", 5*time.Second, func() bool {
			return a.call(map[string]any{"op": "sync"})["op"] == protocol.OpSynced
		})
	}

	{ // send flood
		b := e.login(1, "bob")
		const n = 100 // past the frame burst (40) too
		for i := 0; i < n; i++ {
			b.send(map[string]any{"op": "send", "id": fmt.Sprint(i), "gid": "flood", "cmid": fmt.Sprint("flood-", i), "body": "x"})
		}
		// Every send is answered under its own id, accepted or refused
		// with what to do, so a client can retry each with its cmid.
		accepted, limited := 0, 0
		answered := map[string]bool{}
		for accepted+limited < n {
			f := b.answer()
			id, _ := f["id"].(string)
			if id == "" || answered[id] {
				t.Fatalf("an answer to the flood names no request, or one answered before: %v", f)
			}
			answered[id] = true
			switch {
			case f["op"] == protocol.OpAccepted:
				accepted++
			case code(f) == string(protocol.CodeRateLimited):
				if !strings.Contains(f["message"].(string), "same cmid") {
					t.Errorf("rate_limited send without what to do: %v", f)
				}
				limited++
			default:
				t.Fatalf("a send of the flood: %v", f)
			}
		}
		if accepted < 10 || limited == 0 || accepted > 25 {
			t.Fatalf("%d sends in a burst (limit 20/s, burst 10): %d accepted, %d rate_limited", n, accepted, limited)
		}
	}

	{ // slow writer
		w := e.wire(1, "carol")
		for _, b := range frame([]byte(`{"op":"sync","id":"slow"}`)) {
			w.c.Write([]byte{b})
			time.Sleep(5 * time.Millisecond)
		}
		if f := w.read(); f["op"] != protocol.OpSynced || f["id"] != "slow" {
			t.Fatalf("a frame written a byte at a time: %v", f)
		}
	}

	{ // stalled half frame
		w := e.wire(1, "carol")
		f := frame([]byte(`{"op":"sync","id":"never finished","pad":"` + strings.Repeat("p", 200) + `"}`))
		w.c.Write(f[:len(f)/2])
		// It cannot answer pings inside a frame: cut after a missed pong.
		start := time.Now()
		for {
			if _, err := w.tryRead(20 * time.Second); err != nil {
				if time.Since(start) > 15*time.Second {
					t.Fatalf("a stalled frame held its connection for %v (%v)", time.Since(start), err)
				}
				break
			}
		}
	}

	{ // silent connection
		r := e.dial(1, "")
		start := time.Now()
		f, err := r.tryRead(5 * time.Second)
		if err != nil || code(f) != string(protocol.CodeUnauthenticated) {
			t.Fatalf("no auth frame: %v %v", f, err)
		}
		if _, err := r.tryRead(5 * time.Second); websocket.CloseStatus(err) != CloseUnauthenticated || time.Since(start) > 3*time.Second {
			t.Fatalf("no auth frame: close %v after %v, want %d after the auth timeout", err, time.Since(start), CloseUnauthenticated)
		}
	}

	{ // binary frame
		a := e.login(1, "alice")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.ws.Write(ctx, websocket.MessageBinary, []byte(`{"op":"sync"}`))
		if f := a.answer(); code(f) != string(protocol.CodeBadFrame) {
			t.Fatalf("binary frame: %v", f)
		}
	}

	{ // replayed token after expiry
		// exp is cut down to the second: a token of a 3 s life is good
		// for 2 s at least, time for the fresh one's check, and has been
		// expired for a second at least once its life and a second more
		// have passed.
		const life = 3 * time.Second
		issued := time.Now()
		tok, err := IssueToken([]byte(testSecret), "alice", life)
		if err != nil {
			t.Fatal(err)
		}
		if f := e.dial(1, "?token="+tok).read(); f["op"] != protocol.OpAuthed {
			t.Fatalf("a fresh token: %v", f)
		}
		time.Sleep(time.Until(issued.Add(life + time.Second)))
		r := e.dial(1, "?token="+tok)
		if f := r.read(); code(f) != string(protocol.CodeTokenExpired) {
			t.Fatalf("the same token replayed after it expired: %v", f)
		}
		if _, err := r.tryRead(5 * time.Second); websocket.CloseStatus(err) != CloseUnauthenticated {
			t.Fatalf("replayed token: close %v, want %d", err, CloseUnauthenticated)
		}
		if st, out := e.http("GET", "/v1/sync", tok, nil); st != 401 || out["code"] != string(protocol.CodeTokenExpired) {
			t.Fatalf("replayed token over HTTP: %d %v", st, out)
		}
	}

	{ // forged tokens
		b64 := base64.RawURLEncoding.EncodeToString
		exp := time.Now().Add(time.Hour).Unix()
		claims := b64([]byte(fmt.Sprintf(`{"sub":"carol","exp":%d}`, exp)))
		bob := strings.Split(e.token("bob"), ".")
		signed := func(m jwt.SigningMethod, sub string) string {
			tok, err := jwt.NewWithClaims(m, jwt.RegisteredClaims{Subject: sub, ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}).SignedString([]byte(testSecret))
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		for name, tok := range map[string]string{
			"alg none":                        b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + claims + ".",
			"carol's claims, bob's signature": bob[0] + "." + claims + "." + bob[2],
			"HS384 with the secret":           signed(jwt.SigningMethodHS384, "carol"),
			"a subject that is no user id":    signed(jwt.SigningMethodHS256, "carol/../admin"),
		} {
			r := e.dial(1, "?token="+tok)
			if f := r.read(); code(f) != string(protocol.CodeBadToken) || f["message"] == "" {
				t.Errorf("%s: %v, want bad_token", name, f)
			}
			if st, _ := e.http("GET", "/v1/groups/secret/messages", tok, nil); st != 401 {
				t.Errorf("%s over HTTP: status %d, want 401", name, st)
			}
		}
	}

	{ // reads of other groups
		a := e.login(1, "alice")
		id := int64(0)
		for _, req := range []map[string]any{
			{"op": "pull", "gid": "secret", "after": -1},
			{"op": "read_counts", "gid": "secret", "msgids": []int64{0, 1}},
			{"op": "who_read", "gid": "secret", "msgid": id},
			{"op": "read", "gid": "secret", "upto": 0},
		} {
			if f := a.call(req); code(f) != string(protocol.CodeNotMember) {
				t.Errorf("alice %s of a group she is not in: %v", req["op"], f)
			}
		}
		for _, path := range []string{"/v1/groups/secret/messages?after=-1", "/v1/groups/secret/read_counts?msgids=0,1", "/v1/groups/secret/messages/0/readers"} {
			if st, out := e.http("GET", path, e.token("alice"), nil); st != 403 || out["code"] != string(protocol.CodeNotMember) {
				t.Errorf("GET %s as a non-member: %d %v", path, st, out)
			}
		}
		if f := a.call(map[string]any{"op": "sync"}); strings.Contains(fmt.Sprint(f["groups"]), "secret") {
			t.Errorf("alice's sync lists a group she is not in: %v", f)
		}
	}

	sent := v.stop()
	if len(sent) < 20 {
		t.Fatalf("the victim's sender got only %d messages through", len(sent))
	}
	waitFor(t, "the victim gets every message", 20*time.Second, func() bool { return len(v.m.delivered("g1")) >= len(sent) })
	v.m.checkExactlyOnceInOrder(t, "g1", sent)
	for _, c := range []*member{v.m, v.sender} {
		if st := c.c.Stats(); st.Reconnects != 0 {
			t.Fatalf("%s was disconnected %d times during the attacks", c.uid, st.Reconnects)
		}
	}
	if f := e.login(0, "alice").call(map[string]any{"op": "sync"}); f["op"] != protocol.OpSynced {
		t.Fatalf("the gateway does not serve after the attacks: %v", f)
	}
	v.m.c.Close()
	v.sender.c.Close()
}
