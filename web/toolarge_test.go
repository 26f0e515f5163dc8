package web

import (
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A message whose send frame is over the server's frame limit is answered
// by closing the connection with 1009, not by an error frame. The page
// must not send it again on each new session: that closed every session
// right after its sync, for good (the outbox outlives a reload), and the
// user never learnt why. It is shown as not sent, saying what to do.
func TestASendClosedWith1009IsNotResentForever(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	f := openG(b, c)
	c.answer(f, page(f, false, 10))
	// The peer's read limit is coder/websocket's default, 32 KiB.
	browsertest.Eval[bool](b, `(document.getElementById('composer').body.value = 'x'.repeat(40000),
		document.getElementById('composer').requestSubmit(), true)`)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the peer did not close the connection on the 40 kB frame")
	}
	c = p.nextConn()
	synced(c, c.expect("sync", nil), 10, 10, 10)
	select {
	case <-c.done:
		t.Fatalf("the session after the 1009 close was closed again: the page resent the oversized message (stored outbox %.60s)",
			browsertest.Eval[string](b, `sessionStorage.getItem('chatd.outbox.u')`))
	case <-time.After(3 * time.Second):
	}
	b.WaitUntil("the message shown as not sent", `document.querySelector('#outbox .msg.failed .state')?.textContent.includes('too large')`)
	if stored := browsertest.Eval[string](b, `sessionStorage.getItem('chatd.outbox.u')`); stored != "[]" {
		t.Fatalf("the oversized message is still stored to be resent after a reload: %.60s", stored)
	}
}

// A server that gives its body limit in authed (max_body) is sent no body
// over it: the page shows the message as too large, unsent, and the
// connection stays up. A body within the limit still goes.
func TestABodyOverTheLimitTheServerGivesIsNotSent(t *testing.T) {
	p := newPeer(t)
	p.maxBody = 100
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	c := p.nextConn()
	synced(c, c.expect("sync", nil), 10, 10, 10)
	b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)
	f := openG(b, c)
	c.answer(f, page(f, false, 10))
	// 60 characters of two bytes each: 120 bytes of UTF-8.
	browsertest.Eval[bool](b, `(document.getElementById('composer').body.value = 'é'.repeat(60),
		document.getElementById('composer').requestSubmit(), true)`)
	b.WaitUntil("the message shown as too large", `document.querySelector('#outbox .msg.failed .state')?.textContent.includes('at most 100')`)
	if f := c.next("send", time.Second); f != nil {
		t.Fatalf("the page sent a body of 120 bytes to a server taking 100: %v", f)
	}
	browsertest.Eval[bool](b, `(document.getElementById('composer').body.value = 'é'.repeat(50),
		document.getElementById('composer').requestSubmit(), true)`)
	if f := c.next("send", 10*time.Second); f == nil {
		t.Fatal("a body of 100 bytes, within the limit, was not sent")
	}
	select {
	case <-c.done:
		t.Fatal("the connection ended")
	default:
	}
}
