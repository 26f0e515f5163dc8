package gateway

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

func TestMain(m *testing.M) {
	// Every test stops what it started; connections closing must leave no
	// goroutine behind, not even one waiting in a network read (where a
	// leaked connection waits), so nothing is ignored.
	goleak.VerifyTestMain(m)
}

func code(f map[string]any) string { s, _ := f["code"].(string); return s }

func TestAuthorizationMatrix(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob", "dave")
	alice := e.login(0, "alice")
	first := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "a1", "body": "hello"})
	if first["op"] != "accepted" {
		t.Fatalf("alice's send: %v", first)
	}
	e.removeMember("g1", "dave")
	after := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "a2", "body": "after dave left"})
	headAfter := int64(after["msgid"].(float64))
	waitFor(t, "persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "g1"); return h == headAfter })

	ends := e.topicEnds()

	// No token: the first frame must be auth.
	r := e.dial(0, "")
	r.send(map[string]any{"op": "sync", "id": "1"})
	if f := r.read(); code(f) != string(protocol.CodeUnauthenticated) {
		t.Errorf("no token: %v", f)
	}
	if _, err := r.tryRead(5 * time.Second); websocket.CloseStatus(err) != CloseUnauthenticated {
		t.Errorf("no token: close %v, want %d", err, CloseUnauthenticated)
	}
	// Bad signature and expired tokens.
	forged, _ := IssueToken([]byte("another-secret-another-secret-another"), "alice", time.Hour)
	expired, _ := IssueToken([]byte(testSecret), "alice", -time.Hour)
	for _, c := range []struct{ name, tok, want string }{
		{"bad signature", forged, string(protocol.CodeBadToken)},
		{"expired", expired, string(protocol.CodeTokenExpired)},
		{"garbage", "not.a.jwt", string(protocol.CodeBadToken)},
	} {
		r := e.dial(0, "?token="+c.tok)
		if f := r.read(); code(f) != c.want {
			t.Errorf("%s: %v, want %s", c.name, f, c.want)
		}
		r.send(map[string]any{"op": "auth", "token": c.tok})
		if st, _ := e.http("GET", "/v1/sync", c.tok, nil); st != 401 {
			t.Errorf("%s over HTTP: status %d, want 401", c.name, st)
		}
	}

	// A non-member can do nothing with the group.
	carol := e.login(0, "carol")
	for _, req := range []map[string]any{
		{"op": "send", "gid": "g1", "cmid": "c1", "body": "let me in"},
		{"op": "pull", "gid": "g1"},
		{"op": "ack", "gid": "g1", "upto": 0},
		{"op": "read", "gid": "g1", "upto": 0},
	} {
		if f := carol.call(req); code(f) != string(protocol.CodeNotMember) {
			t.Errorf("non-member %s: %v", req["op"], f)
		}
	}
	// A member who left cannot send and sees nothing after leaving.
	dave := e.login(0, "dave")
	if f := dave.call(map[string]any{"op": "send", "gid": "g1", "cmid": "d1", "body": "still here?"}); code(f) != string(protocol.CodeLeft) {
		t.Errorf("left member send: %v", f)
	}
	page := dave.call(map[string]any{"op": "pull", "gid": "g1"})
	msgs, _ := page["msgs"].([]any)
	if page["op"] != "page" || len(msgs) != 1 || page["more"] != false {
		t.Errorf("left member pull: %v, want only the message from before leaving", page)
	}
	if f := dave.call(map[string]any{"op": "ack", "gid": "g1", "upto": headAfter}); code(f) != string(protocol.CodeLeft) {
		t.Errorf("left member ack past leaving: %v", f)
	}
	// Ack and read beyond the head.
	for _, op := range []string{"ack", "read"} {
		if f := alice.call(map[string]any{"op": op, "gid": "g1", "upto": headAfter + 1000}); code(f) != string(protocol.CodeBeyondHead) {
			t.Errorf("%s beyond head: %v", op, f)
		}
	}
	// Administration needs the admin token; a Bearer header with another
	// is told so, not to send the header it sent.
	if st, out := e.http("POST", "/v1/admin/groups", e.token("alice"), map[string]any{"gid": "g2", "members": []string{"alice"}}); st != 403 ||
		!strings.Contains(fmt.Sprint(out["message"]), "not this gateway's admin token") {
		t.Errorf("admin with a user token: %d %v; want 403 saying the token is not the admin token", st, out)
	}
	if got := e.topicEnds(); got != ends {
		t.Fatalf("refused operations wrote %d records to the topics", got-ends)
	}
}

func TestPushesReachMembersOnEitherGateway(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 2})
	e.group("g1", "alice", "bob", "carol")
	alice, bob := e.login(0, "alice"), e.login(1, "bob")
	e.online(0, "alice")
	e.online(1, "bob")
	acc := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "m1", "body": "hi both"})
	id := acc["msgid"].(float64)
	for name, c := range map[string]*raw{"alice": alice, "bob": bob} {
		for {
			f := c.read()
			if f["op"] != "push" {
				continue
			}
			m := f["msgs"].([]any)[0].(map[string]any)
			if m["msgid"] != id || m["body"] != "hi both" || m["sender"] != "alice" {
				t.Fatalf("%s got push %v", name, f)
			}
			break
		}
	}
}

func TestSlowClientIsCutAndOthersAreNot(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.QueueSize = 8; c.WriteTimeout = 10 * time.Second }})
	e.group("g1", "slow", "fast", "sender")
	slow, fast := e.login(0, "slow"), e.login(0, "fast")
	e.online(0, "slow", "fast")
	body := strings.Repeat("x", 8000)
	const n = 4000
	done := make(chan int)
	go func() { // fast reads everything, counting pushes without decoding them
		got := 0
		for got < n {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, p, err := fast.ws.Read(ctx)
			cancel()
			if err != nil {
				t.Logf("fast client read: %v", err)
				break
			}
			if bytes.HasPrefix(p, []byte(`{"op":"push"`)) {
				got += bytes.Count(p, []byte(`"msgid":`))
			}
		}
		done <- got
	}()
	ctx := context.Background()
	// Far more than loopback socket buffers hold, so the slow client's
	// queue fills once the kernel stops taking bytes.
	sent := make(chan error, 1)
	go func() {
		for i := 0; i < n; i += 100 {
			batch := make([]schema.Message, 100)
			for j := range batch {
				batch[j] = schema.Message{Gid: "g1", Sender: "sender", SentAt: time.Now().UnixMilli(), Body: []byte(body)}
			}
			if _, err := e.prod.SendMessages(ctx, batch); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	// The slow one, reading as soon as it is cut (a close reason can only
	// follow the frame the writer is in, which needs the client to read),
	// finds its connection closed with a reason.
	waitFor(t, "the slow client cut", 60*time.Second, func() bool { return e.gws[0].g.Stats().SlowCut >= 1 })
	var err error
	for err == nil {
		_, err = slow.tryRead(10 * time.Second)
	}
	if websocket.CloseStatus(err) != CloseTooSlow {
		t.Fatalf("slow client: %v, want close %d", err, CloseTooSlow)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if got := <-done; got != n {
		t.Fatalf("the fast client got %d of %d pushes", got, n)
	}
}

func TestOversizedAndMalformedFrames(t *testing.T) {
	e := newEnv(t, envOpts{tune: func(c *Config) { c.MaxBody = 1000 }})
	e.group("g1", "alice")
	alice := e.login(0, "alice")
	cases := []struct {
		frame []byte
		want  protocol.Code
	}{
		{[]byte(`{"op":"send","gid":"g1","cmid":"c1","body":"` + strings.Repeat("y", 1500) + `"}`), protocol.CodeBodyTooLarge},
		{[]byte(`not json`), protocol.CodeBadFrame},
		{[]byte("{\"op\":\"send\",\"gid\":\"g1\",\"cmid\":\"c1\",\"body\":\"\xff\xfe\"}"), protocol.CodeBadFrame},
		{[]byte(`{"op":"send","gid":"g1","cmid":"c1","body":42}`), protocol.CodeBadFrame},
		{[]byte(`{"op":"teleport"}`), protocol.CodeUnknownOp},
		{[]byte(`{"op":"pull","gid":"bad/gid"}`), protocol.CodeInvalid},
	}
	for _, c := range cases {
		alice.send(c.frame)
		if f := alice.read(); code(f) != string(c.want) || f["message"] == "" {
			t.Errorf("frame %.60q: %v, want %s with a message", c.frame, f, c.want)
		}
	}
	// A frame over the read limit (six times the body limit and 4 KiB)
	// closes the connection with 1009.
	alice.send([]byte(`{"op":"sync","pad":"` + strings.Repeat("z", 6*1024+4096) + `"}`))
	var err error
	for err == nil {
		_, err = alice.tryRead(5 * time.Second)
	}
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("huge frame: %v, want close 1009", err)
	}
	// The gateway still serves others.
	if f := e.login(0, "alice").call(map[string]any{"op": "sync"}); f["op"] != "synced" {
		t.Fatalf("after a bad client: %v", f)
	}
}

// A resend whose first send is still in flight (on this gateway or another)
// waits for that send's answer rather than producing again; one still in
// flight after pendingWait is answered unavailable, to retry.
func TestResendWaitsForTheSendInFlight(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	alice := e.login(0, "alice")
	ctx := context.Background()
	// Another gateway took the claims and is producing.
	attempts := map[string]string{}
	for _, cmid := range []string{"c-slow", "c-stuck"} {
		c, err := e.redis.BeginSend(ctx, "g1", "alice", cmid, time.Minute, nil)
		if err != nil || c.State != store.SendClaimed {
			t.Fatalf("claim %s: %+v, %v", cmid, c, err)
		}
		attempts[cmid] = c.Attempt
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.redis.FinishSend(ctx, "g1", "alice", "c-slow", attempts["c-slow"], 4242, time.Hour)
	}()
	start := time.Now()
	f := alice.call(map[string]any{"op": "send", "id": "1", "gid": "g1", "cmid": "c-slow", "body": "hi"})
	if f["op"] != "accepted" || f["msgid"] != float64(4242) {
		t.Fatalf("resend of a send in flight: %v, want accepted with the first send's msgid 4242", f)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("answered after %v, before the send in flight finished", d)
	}
	f = alice.call(map[string]any{"op": "send", "id": "2", "gid": "g1", "cmid": "c-stuck", "body": "hi"})
	if code(f) != string(protocol.CodeUnavailable) || !strings.Contains(f["message"].(string), "still in flight") {
		t.Fatalf("resend of a send stuck in flight: %v, want unavailable, still in flight", f)
	}
	if n := e.topicEndsOf(topics.Messages); n != 0 {
		t.Fatalf("%d records produced, want none: the resends must not produce again", n)
	}
}

// A resend of an accepted message gets the first send's msgid back, also
// when its sender was removed from the group since (the answer to the first
// send was lost): not left_group, which would tell the client its message
// failed although every member got it.
func TestAResendAfterLeavingGetsTheFirstSendsMsgid(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	alice := e.login(0, "alice")
	first := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "a1", "body": "hi"})
	if first["op"] != "accepted" {
		t.Fatalf("send: %v", first)
	}
	e.removeMember("g1", "alice")
	again := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "a1", "body": "hi"})
	if again["op"] != "accepted" || again["msgid"] != first["msgid"] {
		t.Fatalf("resend of an accepted message after leaving: %v, want accepted with msgid %v", again, first["msgid"])
	}
	if f := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "a2", "body": "new"}); code(f) != string(protocol.CodeLeft) {
		t.Fatalf("a new send after leaving: %v, want left_group", f)
	}
}

// A member named twice in one request joins once: a second join would move
// their start past what was sent between the two.
func TestAMemberNamedTwiceJoinsOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.waitReplayed("dup")
	before := e.topicEndsOf(topics.Members)
	st, out := e.http("POST", "/v1/admin/groups", adminToken, map[string]any{"gid": "dup", "members": []string{"a", "a", "b"}})
	if st != 200 || fmt.Sprint(out["added"]) != "[a b]" {
		t.Fatalf("create with a twice: %d %v, want a and b added", st, out)
	}
	if n := e.topicEndsOf(topics.Members) - before; n != 2 {
		t.Fatalf("%d member records written, want 2", n)
	}
}

// samePartition returns a gid other than gid in gid's partition of 4.
func samePartition(t *testing.T, gid string) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		o := fmt.Sprintf("other%d", i)
		if topics.Partition(o, 4) == topics.Partition(gid, 4) {
			return o
		}
	}
	t.Fatal("no gid shares the partition")
	return ""
}

// sendHi sends "hi" to gid on r and returns its msgid.
func sendHi(t *testing.T, r *raw, gid, cmid string) int64 {
	t.Helper()
	f := r.call(map[string]any{"op": "send", "gid": gid, "cmid": cmid, "body": "hi"})
	if f["op"] != "accepted" {
		t.Fatalf("send to %s: %v", gid, f)
	}
	return int64(f["msgid"].(float64))
}

// An ack or read beyond the group's newest message is refused, also when
// another group of its partition has messages past it (msgids are offsets
// of the partition), whether or not the persister has caught up; one up to
// a message of the group that the persister has not written yet is taken.
func TestACursorIsCheckedAgainstTheGroupsOwnMessages(t *testing.T) {
	e := newEnv(t, envOpts{})
	other := samePartition(t, "g1")
	e.group("g1", "alice")
	e.group(other, "bob")
	alice, bob := e.login(0, "alice"), e.login(0, "bob")
	refused := func(when string, upto int64) {
		t.Helper()
		ends := e.topicEndsOf(topics.Acks, topics.Receipts)
		for _, op := range []string{"ack", "read"} {
			if f := alice.call(map[string]any{"op": op, "gid": "g1", "upto": upto}); code(f) != string(protocol.CodeBeyondHead) {
				t.Errorf("%s: %s of g1 upto %s's msgid %d: %v, want beyond_head", when, op, other, upto, f)
			}
		}
		if got := e.topicEndsOf(topics.Acks, topics.Receipts); got != ends {
			t.Errorf("%s: cursors refused wrote %d records", when, got-ends)
		}
	}

	head := sendHi(t, alice, "g1", "a1")
	var otherLast int64
	for i := range 5 {
		otherLast = sendHi(t, bob, other, fmt.Sprint("b", i))
	}
	waitFor(t, "persisted", 10*time.Second, func() bool {
		h1, _ := e.redis.Head(context.Background(), "g1")
		h2, _ := e.redis.Head(context.Background(), other)
		return h1 == head && h2 == otherLast
	})
	refused("persisted", otherLast)

	e.parts["persister"].stop() // the heads in Redis lag the log from here
	pushed := sendHi(t, alice, "g1", "a2")
	refused("the persister behind", sendHi(t, bob, other, "b5"))
	for _, op := range []string{"ack", "read"} {
		if f := alice.call(map[string]any{"op": op, "gid": "g1", "upto": pushed}); f["op"] != "ok" {
			t.Errorf("%s of g1 upto its message %d, not persisted yet: %v, want ok", op, pushed, f)
		}
	}
}

// A refused auth frame is answered under its id, as every other request,
// and a connection that begins with another op is told how to authenticate.
func TestRefusedAuthFrameAnswersItsID(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := e.dial(0, "")
	r.send(map[string]any{"op": "auth", "id": "a-1", "token": "not.a.jwt"})
	if f := r.read(); code(f) != string(protocol.CodeBadToken) || f["id"] != "a-1" {
		t.Errorf("bad token in an auth frame: %v, want bad_token with id a-1", f)
	}
	r = e.dial(0, "")
	r.send(map[string]any{"op": "sync", "id": "s-1"})
	f := r.read()
	if msg, _ := f["message"].(string); code(f) != string(protocol.CodeUnauthenticated) || f["id"] != "s-1" ||
		!strings.Contains(msg, `{"op":"auth","token":...}`) || !strings.Contains(msg, "?token=") {
		t.Errorf("sync before auth: %v, want unauthenticated with id s-1, saying how to authenticate", f)
	}
}

// A frame that does not decode is answered with its id when the id can be
// read, the first frame (auth) too: the client learns which request failed.
func TestAFrameThatDoesNotDecodeIsAnsweredWithItsID(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice")
	alice := e.login(0, "alice")
	alice.send([]byte(`{"op":"ack","id":"e","gid":"g1","upto":"4"}`))
	if f := alice.answer(); code(f) != string(protocol.CodeBadFrame) || f["id"] != "e" {
		t.Errorf("an ack with upto as a string: %v, want bad_frame with id e", f)
	}
	r := e.dial(0, "")
	r.send([]byte(`{"op":"auth","id":"a","token":5}`))
	if f := r.read(); code(f) != string(protocol.CodeBadFrame) || f["id"] != "a" {
		t.Errorf("an auth frame with a number for its token: %v, want bad_frame with id a", f)
	}
}
