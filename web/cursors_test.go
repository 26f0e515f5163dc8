package web

import (
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A read the page meant to send that another device's read overtook (the
// sync says read 20 while the page wanted 15) has nothing left to send. It
// must not stay due: flush sent nothing and kept it due, and scheduled
// itself again at once, spinning the tab's CPU until the user saw a newer
// message.
func TestAReadOvertakenByAnotherDeviceIsNoLongerDue(t *testing.T) {
	_, b, c := listed(t, 20, 20, 10)
	browsertest.Eval[bool](b, `(chat.seen('g', 15), chat.sync(), true)`)
	c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": []any{
		map[string]any{"gid": "g", "head": 20, "ack": 20, "read": 20, "unread": 0, "unread_exact": true}}})
	b.WaitUntil("the other device's read", `chat.group('g').read === 20`)
	browsertest.Eval[bool](b, `(window.flushes = 0, chat.cursors.flush = ((f) => (all) => { window.flushes++; return f(all); })(chat.cursors.flush.bind(chat.cursors)), true)`)
	time.Sleep(2500 * time.Millisecond)
	if n := browsertest.Eval[int](b, `window.flushes`); n > 3 {
		t.Fatalf("with nothing left to send the page flushed its cursors %d times in 2.5 s", n)
	}
}
