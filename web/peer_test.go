package web

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/internal/browsertest"
)

// peer is a scripted gateway for the page: it serves the page with Handler
// and dev tokens, and hands each WebSocket frame the page sends to the test,
// which answers it, pushes, or cuts the connection. Acks and reads are
// answered and recorded (refused as beyond_head past the head set by
// headAt); read_counts is answered with no counts.
type peer struct {
	t     *testing.T
	srv   *httptest.Server
	conns chan *peerConn

	mu      sync.Mutex
	uid     any // the uid of its authed frames (authedAs)
	maxBody int // the max_body of its authed frames; 0: none, as a server before it
	// maxCursors is the max_cursors of its authed frames; 0: none, as a
	// server before the cursors op, which it then refuses as unknown_op.
	maxCursors int
	batches    []cursorsBatch // every cursors frame taken, in arrival order
	singles    int            // ack and read frames received
	urls       []string       // the URL of every WebSocket upgrade, in order
	mute       bool           // take tokens and never answer them (muteAuth)
	head       int64          // acks and reads past it are refused (headAt)
	cursors    []cursorFrame  // every ack and read taken, in arrival order
	refused    []cursorFrame  // every ack and read refused as beyond_head
}

type cursorFrame struct {
	op   string
	gid  string
	upto int64
	at   time.Time // when the peer took it
}

// cursorsBatch is a cursors frame the peer took.
type cursorsBatch struct {
	entries int
	at      time.Time
}

type peerConn struct {
	t       *testing.T
	ws      *websocket.Conn
	in      chan map[string]any
	stashed []map[string]any
	done    chan struct{}
}

func newPeer(t *testing.T) *peer {
	return newPeerTokens(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"uid":"u","token":"t"}`))
	})
}

// newPeerTokens is newPeer with tokens handed out by token.
func newPeerTokens(t *testing.T, token http.HandlerFunc) *peer {
	p := &peer{t: t, conns: make(chan *peerConn, 4), uid: "u", head: math.MaxInt64}
	mux := http.NewServeMux()
	mux.Handle("/", Handler(0))
	mux.HandleFunc("POST /v1/dev/token", token)
	mux.HandleFunc("GET /v1/dev/groups", http.NotFound)
	mux.HandleFunc("GET /v1/ws", p.serveWS)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *peer) serveWS(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.urls = append(p.urls, r.URL.String())
	uid, mute, maxBody, maxCursors := p.uid, p.mute, p.maxBody, p.maxCursors
	p.mu.Unlock()
	if mute {
		for {
			if _, _, err := ws.Read(context.Background()); err != nil {
				return
			}
		}
	}
	// The token in the URL, or in the first frame, as the gateway takes it.
	authed := map[string]any{"op": "authed", "uid": uid}
	if maxBody > 0 {
		authed["max_body"] = maxBody
	}
	if maxCursors > 0 {
		authed["max_cursors"] = maxCursors
	}
	token := r.URL.Query().Get("token")
	if token == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, b, err := ws.Read(ctx)
		cancel()
		var f map[string]any
		if err != nil || json.Unmarshal(b, &f) != nil || f["op"] != "auth" {
			ws.Close(4001, "unauthenticated: no token")
			return
		}
		token, _ = f["token"].(string)
		authed["id"] = f["id"]
	}
	if token != "t" {
		ws.Close(4001, "bad_token: not the token the peer handed out")
		return
	}
	c := &peerConn{t: p.t, ws: ws, in: make(chan map[string]any, 100), done: make(chan struct{})}
	c.write(authed)
	p.conns <- c
	defer close(c.done)
	for {
		_, b, err := ws.Read(context.Background())
		if err != nil {
			return
		}
		var f map[string]any
		if err := json.Unmarshal(b, &f); err != nil {
			p.t.Errorf("the page sent a frame that is not JSON: %q", b)
			continue
		}
		switch f["op"] {
		case "ack", "read":
			p.mu.Lock()
			p.singles++
			p.mu.Unlock()
			gid, _ := f["gid"].(string)
			if refusal := p.cursor(b, f["op"].(string), gid, f["upto"]); refusal != nil {
				refusal["op"], refusal["id"] = "error", f["id"]
				delete(refusal, "gid")
				c.write(refusal)
			} else {
				c.write(map[string]any{"op": "ok", "id": f["id"]})
			}
		case "cursors":
			acks, _ := f["acks"].([]any)
			reads, _ := f["reads"].([]any)
			if maxCursors == 0 || len(acks)+len(reads) > maxCursors {
				c.write(map[string]any{"op": "error", "id": f["id"], "code": "invalid", "message": fmt.Sprintf("%d entries: this peer takes %d", len(acks)+len(reads), maxCursors)})
				p.t.Errorf("the page sent a cursors frame of %d entries to a server that takes %d", len(acks)+len(reads), maxCursors)
				continue
			}
			p.mu.Lock()
			p.batches = append(p.batches, cursorsBatch{len(acks) + len(reads), time.Now()})
			p.mu.Unlock()
			refused := []any{}
			for op, l := range map[string][]any{"ack": acks, "read": reads} {
				for _, e := range l {
					e, _ := e.(map[string]any)
					gid, _ := e["gid"].(string)
					if refusal := p.cursor(b, op, gid, e["upto"]); refusal != nil {
						refusal["op"], refusal["upto"] = op, e["upto"]
						refused = append(refused, refusal)
					}
				}
			}
			ans := map[string]any{"op": "ok", "id": f["id"]}
			if len(refused) > 0 {
				ans["refused"] = refused
			}
			c.write(ans)
		case "read_counts":
			c.write(map[string]any{"op": "counts", "id": f["id"], "gid": f["gid"], "counts": []any{}})
		default:
			c.in <- f
		}
	}
}

// cursor takes op (ack or read) of gid up to upto, from frame b, or
// refuses it as beyond_head past the head set by headAt: the refusal's
// gid, code and message.
func (p *peer) cursor(b []byte, op, gid string, v any) map[string]any {
	// A cursor is a msgid: NaN is sent as null, and 10.5 is no msgid.
	upto, ok := v.(float64)
	if !ok || upto != math.Trunc(upto) || gid == "" {
		p.t.Errorf("the page sent a cursor that names no message of a group: %s", b)
	}
	cf := cursorFrame{op, gid, int64(upto), time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cf.upto > p.head {
		p.refused = append(p.refused, cf)
		return map[string]any{"gid": gid, "code": "beyond_head", "message": "beyond the newest message of the group"}
	}
	p.cursors = append(p.cursors, cf)
	return nil
}

func (p *peer) nextConn() *peerConn {
	p.t.Helper()
	select {
	case c := <-p.conns:
		return c
	case <-time.After(20 * time.Second):
		p.t.Fatal("the page did not connect within 20 s")
		return nil
	}
}

// authedAs makes the peer name uid in the authed frames of the next
// connections.
func (p *peer) authedAs(uid any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.uid = uid
}

// muteAuth makes the peer take the next connections and never answer
// their token: no authed, no close.
func (p *peer) muteAuth() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mute = true
}

// upgrades is how many WebSocket connections the page opened.
func (p *peer) upgrades() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.urls)
}

// headAt makes the peer refuse acks and reads past head as beyond_head.
func (p *peer) headAt(head int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.head = head
}

// refusals is how many acks and reads the peer refused.
func (p *peer) refusals() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.refused)
}

// maxCursor is the highest upto of op the page sent and the peer took.
func (p *peer) maxCursor(op string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	top := int64(-2)
	for _, c := range p.cursors {
		if c.op == op {
			top = max(top, c.upto)
		}
	}
	return top
}

func (c *peerConn) write(v any) {
	b, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.ws.Write(ctx, websocket.MessageText, b) // a closed connection is the test's doing
}

// expect returns the next frame of op for which match (nil: any) holds,
// keeping the others for later expects.
func (c *peerConn) expect(op string, match func(f map[string]any) bool) map[string]any {
	c.t.Helper()
	ok := func(f map[string]any) bool { return f["op"] == op && (match == nil || match(f)) }
	for i, f := range c.stashed {
		if ok(f) {
			c.stashed = append(c.stashed[:i], c.stashed[i+1:]...)
			return f
		}
	}
	deadline := time.After(20 * time.Second)
	for {
		select {
		case f := <-c.in:
			if ok(f) {
				return f
			}
			c.stashed = append(c.stashed, f)
		case <-deadline:
			c.t.Fatalf("the page sent no %s within 20 s; it sent %v", op, c.stashed)
		}
	}
}

// answer replies to request f with frame v (its op and fields).
func (c *peerConn) answer(f map[string]any, v map[string]any) {
	v["id"] = f["id"]
	c.write(v)
}

func msg(id, prev int64, sender, body string) map[string]any {
	m := map[string]any{"gid": "g", "msgid": id, "sender": sender, "sent_at": 1763700000000 + id*1000, "cmid": fmt.Sprint("c", id), "body": body}
	if prev >= -1 {
		m["prev"] = prev
	}
	return m
}

func page(f map[string]any, more bool, head int64, msgs ...map[string]any) map[string]any {
	p := map[string]any{"op": "page", "gid": "g", "msgs": append([]map[string]any{}, msgs...), "more": more, "head": head}
	for _, k := range []string{"after", "before"} {
		if v, ok := f[k]; ok {
			p[k] = v
		}
	}
	return p
}

// roundTrip has the page ask the peer a question on its connection
// (read_counts, which the peer answers itself) and waits until the page
// has the answer. The peer reads a connection's frames in order, and the
// page handles them in order: by then the peer has taken every frame the
// page sent before the question, and the page has handled every frame
// the peer wrote before the answer. A check that the page did not do
// something follows it, rather than a wait that a slow machine outlasts.
func roundTrip(t *testing.T, b *browsertest.Tab) {
	t.Helper()
	roundTripAfter(t, b, "")
}

// flushCursors has the page send at once every ack and read it holds
// back, due or not (what its timers would send later), waits for their
// answers, and makes a round trip after them.
// pastTheReadInterval waits past the page's read interval (1 s after a
// message is seen) and flushes what it holds back (flushCursors), so
// every read it would make of what was on screen has reached the peer.
func pastTheReadInterval(t *testing.T, b *browsertest.Tab) {
	time.Sleep(2500 * time.Millisecond)
	flushCursors(t, b)
}

func flushCursors(t *testing.T, b *browsertest.Tab) {
	t.Helper()
	roundTripAfter(t, b, `while (chat.cursors.flushing) await new Promise((r) => setTimeout(r, 10));
		await chat.cursors.flush(true);`)
}

// roundTripAfter runs the JavaScript first (awaiting), then the round trip.
func roundTripAfter(t *testing.T, b *browsertest.Tab, first string) {
	t.Helper()
	browsertest.Eval[bool](b, `(window.roundTrip = 'asked', (async () => {
		`+first+`
		await chat.conn.request({ op: 'read_counts', gid: 'g', msgids: [1] });
	})().then(() => { window.roundTrip = 'answered'; }, (e) => { window.roundTrip = 'failed: ' + e; }), true)`)
	b.WaitUntil("a round trip on the page's connection", `window.roundTrip === 'answered'`)
}

// listDrawn waits until the group list has been drawn as the page's state
// now is: it is drawn a moment after the state changes (DRAW_EVERY in
// static/grouplist.js), once for all the changes of that moment.
func listDrawn(b *browsertest.Tab) {
	b.WaitUntil("the group list drawn", `document.getElementById('groups').dataset.drawing === undefined`)
}
