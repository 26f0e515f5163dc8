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
