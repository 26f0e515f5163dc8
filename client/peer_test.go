package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// peer is a small in-memory gateway that speaks the client protocol: one
// partition whose offsets are the msgids of every group (so a group's msgids
// are sparse), idempotent sends by cmid, pulls, acks, reads and pushes. Its
// knobs make the faults the client must survive.
type peer struct {
	t   testing.TB
	srv *httptest.Server
	url string
	wg  sync.WaitGroup // handlers

	pushMu sync.Mutex // appends and their pushes, in log order

	mu     sync.Mutex
	offset int64
	groups map[string]*peerGroup
	conns  map[*peerConn]bool
	frames []protocol.Request // every decoded client frame
	cursor []cursorRec        // every ack and read accepted

	// knobs, guarded by mu
	refuse         bool                                   // answer upgrades with 503
	refuseUpgrades int                                    // upgrades answered 503 with a gateway's unavailable body, as one shutting down
	closeSyncs     int                                    // syncs answered by closing the connection with closeCode
	closeCode      websocket.StatusCode                   // their close status
	closeAuths     int                                    // connections closed with closeCode right after their authed answer, as a gateway that cannot register them
	dropPush       func(protocol.Message) bool            // push not sent
	prevUnknown    bool                                   // pushes carry no prev
	swallowSends   int                                    // send answers not sent (the message is stored)
	overloadSends  int                                    // sends refused as overloaded (not stored)
	refuseSends    int                                    // sends refused with sendRefusal (not stored)
	sendRefusal    protocol.Code                          // their code
	refusePulls    int                                    // pulls refused with pullRefusal
	refuseSyncs    int                                    // syncs refused as unavailable
	pullRefusal    protocol.Code                          // their code
	pushBeforePage func(after int64) []protocol.Message   // pushed to the puller just before its page
	lagTo          int64                                  // if >= 0, pulls see msgids <= lagTo only (a lagging store)
	earlyPush      []protocol.Message                     // pushed right after authed, before the sync answer
	silentAfter    int                                    // connections that go silent after their sync answer: no reads, answers or pongs (a peer gone without a FIN)
	extraGroups    func(uid string) []protocol.GroupState // added to every sync answer
	syncGroups     string                                 // if set, every sync answer's groups, as is (JSON)
	afterSync      func(uid string) []protocol.Message    // pushed to the connection right after its sync answer
	frameRate      float64                                // if > 0, frames a connection may send a second, as a gateway's; the rest refused as rate_limited
	frameBurst     int                                    // and at once
	limited        []string                               // the ops of the frames refused as rate_limited
	maxBody        int                                    // the max_body of its authed frames; 0: none, as a server before it
	whoRead        bool                                   // who_read is answered; without it, never, as an op the peer does not know
	pullDelay      time.Duration                          // if > 0, pull answers are written this long after their request, each on its own, as over a network of that round trip
	pullsInFlight  int                                    // pulls delayed by pullDelay, not answered yet
	mostPulls      int                                    // the most pullsInFlight was
	maxCursors     int                                    // the max_cursors of its authed frames; 0: none, as a server before the cursors op, which it answers unknown_op

	quit     chan struct{} // closed by close: silent connections end
	quitOnce sync.Once
}

type peerGroup struct {
	members map[string]bool
	msgs    []protocol.Message
	acks    map[string]int64
	reads   map[string]int64
	cmids   map[string]int64 // uid/cmid → msgid
}

type peerConn struct {
	ws  *websocket.Conn
	uid string

	tokens float64   // guarded by peer.mu: the frame bucket, as of last
	last   time.Time // zero: full
}

type cursorRec struct {
	op, gid, uid string
	upto         int64
}

// newPeer starts a peer with groups gid → members.
func newPeer(t testing.TB, groups map[string][]string) *peer {
	p := &peer{t: t, offset: 3, groups: map[string]*peerGroup{}, conns: map[*peerConn]bool{}, lagTo: -1, quit: make(chan struct{})}
	for gid, uids := range groups {
		g := &peerGroup{members: map[string]bool{}, acks: map[string]int64{}, reads: map[string]int64{}, cmids: map[string]int64{}}
		for _, u := range uids {
			g.members[u] = true
			g.acks[u], g.reads[u] = -1, -1
		}
		p.groups[gid] = g
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serveHTTP))
	p.url = "ws" + strings.TrimPrefix(p.srv.URL, "http") + "/v1/ws"
	t.Cleanup(p.close)
	return p
}

func (p *peer) close() {
	p.quitOnce.Do(func() { close(p.quit) })
	p.kill()
	p.srv.Close()
	p.wg.Wait()
}

// cut closes every connection with a close status and reason, as a gateway
// cutting a client too slow to read would.
func (p *peer) cut(code websocket.StatusCode, reason string) {
	p.mu.Lock()
	var conns []*peerConn
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	for _, pc := range conns {
		_ = pc.ws.Close(code, reason)
	}
}

// kill drops every connection, as a restarting gateway would.
func (p *peer) kill() {
	p.mu.Lock()
	var conns []*peerConn
	for pc := range p.conns {
		conns = append(conns, pc)
	}
	p.mu.Unlock()
	for _, pc := range conns {
		pc.ws.CloseNow()
	}
}

func (p *peer) set(f func(p *peer)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *peer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	p.wg.Add(1)
	defer p.wg.Done()
	p.mu.Lock()
	refuse, body := p.refuse, p.refuseUpgrades > 0
	if body {
		p.refuseUpgrades--
	}
	p.mu.Unlock()
	switch {
	case refuse:
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	case body:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write(protocol.Marshal(map[string]string{"code": string(protocol.CodeUnavailable), "message": "the gateway is shutting down; reconnect to another"}))
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	pc := &peerConn{ws: ws}
	defer func() {
		p.mu.Lock()
		delete(p.conns, pc)
		p.mu.Unlock()
		ws.CloseNow()
	}()
	ctx := context.Background()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		req, err := protocol.Decode(b, 1<<16)
		if err != nil {
			p.write(pc, err.(*protocol.Error).Frame(req.ID))
			continue
		}
		p.mu.Lock()
		p.frames = append(p.frames, req)
		limited := !p.takeFrameLocked(pc)
		if limited {
			p.limited = append(p.limited, req.Op)
		} else if req.Op == protocol.OpCursors {
			p.chargeLocked(pc, protocol.CursorsFrames(len(req.Acks)+len(req.Reads))) // as a gateway charges it
		}
		p.mu.Unlock()
		if limited {
			p.write(pc, protocol.Errorf(protocol.CodeRateLimited, "too many frames; slow down and retry").Frame(req.ID))
			continue
		}
		if pc.uid == "" && req.Op != protocol.OpAuth {
			p.write(pc, protocol.Errorf(protocol.CodeUnauthenticated, "auth first").Frame(req.ID))
			continue
		}
		if !p.handle(pc, req) {
			return
		}
		p.mu.Lock()
		silent := req.Op == protocol.OpSync && p.silentAfter > 0
		if silent {
			p.silentAfter--
		}
		p.mu.Unlock()
		if silent {
			<-p.quit
			return
		}
	}
}

// takeFrameLocked takes a token of pc's frame bucket, as a gateway does
// for every frame of a connection, if the peer has a frame rate.
func (p *peer) takeFrameLocked(pc *peerConn) bool {
	if p.frameRate <= 0 {
		return true
	}
	p.refillLocked(pc)
	if pc.tokens < 1 {
		return false
	}
	pc.tokens--
	return true
}

// chargeLocked takes n tokens more of pc's frame bucket, into debt if need
// be, as a gateway charges an answer that costs more than its frame (a
// sync of many groups), if the peer has a frame rate.
func (p *peer) chargeLocked(pc *peerConn, n int) {
	if p.frameRate <= 0 || n <= 0 {
		return
	}
	p.refillLocked(pc)
	pc.tokens -= float64(n)
}

// refillLocked adds the tokens pc earned since its bucket was last looked
// at (a new connection's is full).
func (p *peer) refillLocked(pc *peerConn) {
	now := time.Now()
	if pc.last.IsZero() {
		pc.tokens = float64(p.frameBurst)
	} else {
		pc.tokens = min(float64(p.frameBurst), pc.tokens+now.Sub(pc.last).Seconds()*p.frameRate)
	}
	pc.last = now
}

func (p *peer) write(pc *peerConn, b []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = pc.ws.Write(ctx, websocket.MessageText, b)
}

// handle answers one request; false closes the connection.
func (p *peer) handle(pc *peerConn, req protocol.Request) bool {
	fail := func(code protocol.Code, msg string) bool {
		p.write(pc, protocol.Errorf(code, "%s", msg).Frame(req.ID))
		return true
	}
	switch req.Op {
	case protocol.OpAuth:
		if req.Token == "bad" {
			p.write(pc, protocol.Errorf(protocol.CodeBadToken, "forged").Frame(req.ID))
			return false
		}
		pc.uid = req.Token
		p.mu.Lock()
		p.conns[pc] = true
		early, maxBody, maxCursors := p.earlyPush, p.maxBody, p.maxCursors
		p.mu.Unlock()
		p.write(pc, protocol.Marshal(protocol.Authed{Op: protocol.OpAuthed, ID: req.ID, Uid: pc.uid, MaxBody: maxBody, MaxCursors: maxCursors}))
		p.mu.Lock()
		cut, code := p.closeAuths > 0, p.closeCode
		if cut {
			p.closeAuths--
		}
		p.mu.Unlock()
		if cut {
			_ = pc.ws.Close(code, "unavailable: the server could not register this connection; reconnect after a back-off")
			return false
		}
		if early != nil {
			p.write(pc, protocol.Marshal(protocol.Push{Op: protocol.OpPush, Msgs: early}))
		}
		return true
	case protocol.OpSync:
		p.mu.Lock()
		if p.closeSyncs > 0 {
			p.closeSyncs--
			code := p.closeCode
			p.mu.Unlock()
			_ = pc.ws.Close(code, "unavailable: the server could not register this connection; reconnect after a back-off")
			return false
		}
		if p.refuseSyncs > 0 {
			p.refuseSyncs--
			p.mu.Unlock()
			return fail(protocol.CodeUnavailable, "memberships are being rebuilt; retry shortly")
		}
		out := protocol.Synced{Op: protocol.OpSynced, ID: req.ID, Groups: []protocol.GroupState{}}
		for gid, g := range p.groups {
			if !g.members[pc.uid] {
				continue
			}
			st := protocol.GroupState{Gid: gid, Head: g.head(-1), Ack: g.acks[pc.uid], Read: g.reads[pc.uid], UnreadExact: true}
			for _, m := range g.msgs {
				if m.MsgID > st.Ack {
					st.Unread++
				}
			}
			out.Groups = append(out.Groups, st)
		}
		if p.extraGroups != nil {
			out.Groups = append(out.Groups, p.extraGroups(pc.uid)...)
		}
		raw, after := p.syncGroups, p.afterSync
		p.chargeLocked(pc, protocol.SyncFrames(len(out.Groups))) // as a gateway does, once answered
		p.mu.Unlock()
		if raw != "" {
			p.write(pc, fmt.Appendf(nil, `{"op":"synced","id":%q,"groups":%s}`, req.ID, raw))
			return true
		}
		p.write(pc, protocol.Marshal(out))
		if after != nil {
			if msgs := after(pc.uid); len(msgs) > 0 {
				p.write(pc, protocol.Marshal(protocol.Push{Op: protocol.OpPush, Msgs: msgs}))
			}
		}
	case protocol.OpSend:
		p.pushMu.Lock()
		p.mu.Lock()
		if p.overloadSends > 0 {
			p.overloadSends--
			p.mu.Unlock()
			p.pushMu.Unlock()
			return fail(protocol.CodeOverloaded, "overloaded")
		}
		if p.refuseSends > 0 {
			p.refuseSends--
			code := p.sendRefusal
			p.mu.Unlock()
			p.pushMu.Unlock()
			return fail(code, "try again later")
		}
		g := p.groups[req.Gid]
		if g == nil || !g.members[pc.uid] {
			p.mu.Unlock()
			p.pushMu.Unlock()
			return fail(protocol.CodeNotMember, "not a member")
		}
		key := pc.uid + "/" + req.Cmid
		id, dup := g.cmids[key]
		var m protocol.Message
		if !dup {
			m = p.appendLocked(req.Gid, pc.uid, req.Body, req.Cmid)
			id = m.MsgID
			g.cmids[key] = id
		}
		swallow := p.swallowSends > 0
		if swallow {
			p.swallowSends--
		}
		p.mu.Unlock()
		if !dup {
			p.push(m)
		}
		p.pushMu.Unlock()
		if !swallow {
			p.write(pc, protocol.Marshal(protocol.Accepted{Op: protocol.OpAccepted, ID: req.ID, Gid: req.Gid, Cmid: req.Cmid, MsgID: id}))
		}
	case protocol.OpPull:
		p.mu.Lock()
		if p.refusePulls > 0 {
			p.refusePulls--
			code := p.pullRefusal
			p.mu.Unlock()
			return fail(code, "try again later")
		}
		g := p.groups[req.Gid]
		if g == nil || !g.members[pc.uid] {
			p.mu.Unlock()
			return fail(protocol.CodeNotMember, "not a member")
		}
		after, limit := int64(-1), req.Limit
		if req.After != nil {
			after = *req.After
		}
		if limit == 0 {
			limit = 100
		}
		page := protocol.Page{Op: protocol.OpPage, ID: req.ID, Gid: req.Gid, After: after, Msgs: []protocol.Message{}, Head: g.head(p.lagTo)}
		for _, m := range g.msgs {
			if m.MsgID <= after || p.lagTo >= 0 && m.MsgID > p.lagTo {
				continue
			}
			if len(page.Msgs) == limit {
				page.More = true
				break
			}
			m.Prev = nil
			page.Msgs = append(page.Msgs, m)
		}
		before, delay := p.pushBeforePage, p.pullDelay
		if delay > 0 {
			p.pullsInFlight++
			p.mostPulls = max(p.mostPulls, p.pullsInFlight)
			p.wg.Add(1) // within this handler's: close waits for it
			p.mu.Unlock()
			go func() {
				defer p.wg.Done()
				select {
				case <-time.After(delay):
				case <-p.quit:
				}
				p.mu.Lock()
				p.pullsInFlight-- // before the answer: the next pull it lets out counts after it
				p.mu.Unlock()
				p.write(pc, protocol.Marshal(page))
			}()
			return true
		}
		p.mu.Unlock()
		if before != nil {
			if msgs := before(after); len(msgs) > 0 {
				p.write(pc, protocol.Marshal(protocol.Push{Op: protocol.OpPush, Msgs: msgs}))
			}
		}
		p.write(pc, protocol.Marshal(page))
	case protocol.OpWhoRead:
		p.mu.Lock()
		if !p.whoRead {
			p.mu.Unlock()
			return true
		}
		g := p.groups[req.Gid]
		if g == nil || !g.members[pc.uid] || req.MsgID == nil {
			p.mu.Unlock()
			return fail(protocol.CodeNotMember, "not a member")
		}
		i := slices.IndexFunc(g.msgs, func(m protocol.Message) bool { return m.MsgID == *req.MsgID })
		if i < 0 {
			p.mu.Unlock()
			return fail(protocol.CodeNotFound, "no such message")
		}
		out := protocol.Readers{Op: protocol.OpReaders, ID: req.ID, Gid: req.Gid, MsgID: *req.MsgID, Read: []string{}, Unread: []string{}}
		for uid := range g.members {
			switch {
			case uid == g.msgs[i].Sender:
			case g.reads[uid] >= *req.MsgID:
				out.Read = append(out.Read, uid)
			default:
				out.Unread = append(out.Unread, uid)
			}
		}
		p.chargeLocked(pc, protocol.WhoReadFrames(len(out.Read)+len(out.Unread))) // as a gateway does, once answered
		p.mu.Unlock()
		p.write(pc, protocol.Marshal(out))
	case protocol.OpAck, protocol.OpRead:
		p.mu.Lock()
		perr := p.cursorLocked(pc.uid, req.Op, req.Gid, *req.Upto)
		p.mu.Unlock()
		if perr != nil {
			return fail(perr.Code, perr.Message)
		}
		if req.ID != "" {
			p.write(pc, protocol.Marshal(protocol.OK{Op: protocol.OpOK, ID: req.ID}))
		}
	case protocol.OpCursors:
		p.mu.Lock()
		limit := p.maxCursors
		if n := len(req.Acks) + len(req.Reads); limit == 0 || n > limit {
			p.mu.Unlock()
			if limit == 0 {
				return fail(protocol.CodeUnknownOp, `unknown op "cursors"`)
			}
			return fail(protocol.CodeInvalid, fmt.Sprintf("cursors of %d entries, past %d", n, limit))
		}
		out := protocol.OK{Op: protocol.OpOK, ID: req.ID}
		for _, l := range []struct {
			op   string
			list []protocol.Cursor
		}{{protocol.OpAck, req.Acks}, {protocol.OpRead, req.Reads}} {
			for _, c := range l.list {
				if perr := p.cursorLocked(pc.uid, l.op, c.Gid, *c.Upto); perr != nil {
					out.Refused = append(out.Refused, protocol.Refusal{Op: l.op, Gid: c.Gid, Upto: *c.Upto, Code: perr.Code, Message: perr.Message})
				}
			}
		}
		p.mu.Unlock()
		if req.ID != "" || len(out.Refused) > 0 {
			p.write(pc, protocol.Marshal(out))
		}
	}
	return true
}

// cursorLocked takes uid's op (ack or read) of gid up to upto, or refuses
// it as a gateway would.
func (p *peer) cursorLocked(uid, op, gid string, upto int64) *protocol.Error {
	g := p.groups[gid]
	if g == nil || !g.members[uid] {
		return protocol.Errorf(protocol.CodeNotMember, "not a member")
	}
	if upto > g.head(p.lagTo) { // a gateway that checks against its lagging store
		return protocol.Errorf(protocol.CodeBeyondHead, "beyond the group's head")
	}
	cur := g.acks
	if op == protocol.OpRead {
		cur = g.reads
	}
	cur[uid] = max(cur[uid], upto)
	p.cursor = append(p.cursor, cursorRec{op, gid, uid, upto})
	return nil
}

// head is the newest msgid, or the newest <= lagTo when lagTo >= 0.
func (g *peerGroup) head(lagTo int64) int64 {
	h := int64(-1)
	for _, m := range g.msgs {
		if lagTo < 0 || m.MsgID <= lagTo {
			h = m.MsgID
		}
	}
	return h
}

// appendLocked appends a message; offsets advance by 1 to 3, as if other
// groups shared the partition.
func (p *peer) appendLocked(gid, sender, body, cmid string) protocol.Message {
	g := p.groups[gid]
	prev := g.head(-1)
	m := protocol.Message{Gid: gid, MsgID: p.offset, Prev: &prev, Sender: sender, SentAt: time.Now().UnixMilli(), Cmid: cmid, Body: body}
	p.offset += 1 + p.offset%3
	g.msgs = append(g.msgs, m)
	return m
}

// push sends m to every connected member, unless dropped.
func (p *peer) push(m protocol.Message) {
	p.mu.Lock()
	g := p.groups[m.Gid]
	if p.prevUnknown {
		m.Prev = nil
	}
	drop := p.dropPush != nil && p.dropPush(m)
	var to []*peerConn
	for pc := range p.conns {
		if g.members[pc.uid] && !drop {
			to = append(to, pc)
		}
	}
	p.mu.Unlock()
	for _, pc := range to {
		p.write(pc, protocol.Marshal(protocol.Push{Op: protocol.OpPush, Msgs: []protocol.Message{m}}))
	}
}

// post appends a message from another user and pushes it.
func (p *peer) post(gid, sender, body string) protocol.Message {
	p.pushMu.Lock()
	defer p.pushMu.Unlock()
	p.mu.Lock()
	m := p.appendLocked(gid, sender, body, "")
	p.mu.Unlock()
	p.push(m)
	return m
}

// pushRaw sends msgs as one push frame to uid's connections, as is.
func (p *peer) pushRaw(uid string, msgs ...protocol.Message) {
	for _, pc := range p.connsOf(uid) {
		p.write(pc, protocol.Marshal(protocol.Push{Op: protocol.OpPush, Msgs: msgs}))
	}
}

// connsOf returns uid's connections.
func (p *peer) connsOf(uid string) []*peerConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var to []*peerConn
	for pc := range p.conns {
		if pc.uid == uid {
			to = append(to, pc)
		}
	}
	return to
}

// resync sends uid's connections a resync frame.
func (p *peer) resync(uid string) {
	for _, pc := range p.connsOf(uid) {
		p.write(pc, protocol.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: protocol.ResyncPushRoute}))
	}
}

func (p *peer) msgs(gid string) []protocol.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]protocol.Message(nil), p.groups[gid].msgs...)
}

// cursors returns the accepted ack (or read) uptos of uid in gid, in order.
func (p *peer) cursors(op, gid, uid string) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int64
	for _, c := range p.cursor {
		if c.op == op && c.gid == gid && c.uid == uid {
			out = append(out, c.upto)
		}
	}
	return out
}

// requests returns the client frames of op received so far.
func (p *peer) requests(op string) []protocol.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []protocol.Request
	for _, r := range p.frames {
		if r.Op == op {
			out = append(out, r)
		}
	}
	return out
}
