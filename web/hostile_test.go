package web

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A message whose sent_at is no date a browser can show (a record written
// to chat.messages by another producer: any int64 is a valid SentAt) is
// drawn without its time. It threw while drawn, and every message after it
// in the same page was never drawn, though held, acked and later marked
// read with the rest.
func TestAMessageWithAnImpossibleTimeDoesNotHideThoseAfterIt(t *testing.T) {
	_, b, c := listed(t, 13, 10, 10)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	odd := msg(12, -2, "v", "m12")
	odd["sent_at"] = int64(9e18)
	c.answer(f, page(f, false, 13, msg(11, -2, "v", "m11"), odd, msg(13, -2, "v", "m13")))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 13))
	time.Sleep(500 * time.Millisecond)
	if got := b.Bodies(); len(got) != 3 {
		t.Fatalf("the page of 11, 12 (sent_at 9e18) and 13 shows %q, want all three; problems %v", got, b.Problems())
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
	if got := browsertest.Eval[string](b, `document.querySelector('#messages .msg[data-msgid="12"] time').textContent`); got != "" {
		t.Errorf("the impossible time is shown as %q, want nothing", got)
	}
}

// An answer that comes after its request timed out is for a request the
// page has given up on and redone: a late refusal of a send that its
// resend got through must not be shown as an error.
func TestALateRefusalOfARequestGivenUpOnIsNotShown(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	c.answer(f, page(f, false, 10))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 10))
	browsertest.Eval[bool](b, `(document.getElementById('composer').body.value = 'hi', document.getElementById('composer').requestSubmit(), true)`)
	first := c.expect("send", nil)
	again := c.expect("send", func(f map[string]any) bool { return f["id"] != first["id"] }) // after the 10 s timeout
	if again["cmid"] != first["cmid"] {
		t.Fatalf("the resend has cmid %v, the send %v", again["cmid"], first["cmid"])
	}
	c.answer(again, map[string]any{"op": "accepted", "gid": "g", "cmid": again["cmid"], "msgid": 11})
	c.answer(first, map[string]any{"op": "error", "code": "overloaded", "message": "the gateway has more sends in hand than it can take in time"})
	time.Sleep(500 * time.Millisecond)
	if toast := browsertest.Eval[string](b, `document.getElementById('toast').hidden ? '' : document.getElementById('toast').textContent`); toast != "" {
		t.Fatalf("the late refusal of a send whose resend was accepted is shown: %q", toast)
	}
}
