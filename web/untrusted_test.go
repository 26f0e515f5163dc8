package web

import (
	"strings"
	"time"

	"testing"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/internal/browsertest"
)

// An authed frame whose uid is no id leaves the user as it was. A uid 7
// became the page's user: its own messages were shown as another's,
// without their read counts, and its name read "7".
func TestAnAuthedFrameWhoseUidIsNoIdKeepsTheUser(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	opened(c, b, "u")
	watchWarnings(b)
	p.authedAs(7)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	<-c.done
	c = p.nextConn()
	synced(c, c.expect("sync", nil), 11, 10, 10)
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	c.answer(f, page(f, false, 11, msg(11, noPrev, "u", "m11")))
	b.WaitUntil("m11 shown", `document.querySelectorAll('#messages .msg').length === 3`)
	if got := browsertest.Eval[string](b, `document.getElementById('me').textContent`); got != "u" {
		t.Errorf("the page names its user %q, want u", got)
	}
	if got := browsertest.Eval[string](b, `document.querySelector('#messages .msg[data-msgid="11"]').className`); got != "msg mine" {
		t.Errorf("u's own message 11 is drawn as %q, want msg mine", got)
	}
	quietWarned(t, b, 1)
}

// A page whose more is no boolean is a last page. more "no" had the page
// pull again from where it was (and show an error when that brought
// nothing), and an older page's more "no" kept it paging up at every
// scroll to the top.
func TestAPageWhoseMoreIsNoBooleanIsTheLast(t *testing.T) {
	_, b, c := listed(t, 11, 10, 10)
	watchWarnings(b)
	f := openG(b, c)
	fwd := page(f, false, 11, msg(11, noPrev, "v", "m11"))
	fwd["more"] = "no"
	c.answer(f, fwd)
	f = c.expect("pull", nil)
	if f["before"] != 11.0 {
		t.Fatalf("after a page whose more is \"no\" the page pulled %v, want the older page before 11", f)
	}
	older := page(f, false, 11, msg(10, noPrev, "v", "m10"))
	older["more"] = "no"
	c.answer(f, older)
	b.WaitUntil("the beginning shown", `document.getElementById('older').textContent === 'The beginning of g.'`)
	quietWarned(t, b, 2)
}

// A receipts frame of a group the page is not in is dropped. Each such
// group was kept, hidden, for the life of the page.
func TestReceiptsOfAGroupThePageIsNotInAreDropped(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	opened(c, b, "u")
	watchWarnings(b)
	for _, gid := range []string{"h", "i", "j"} {
		c.write(map[string]any{"op": "receipts", "gid": gid, "counts": []any{map[string]any{"msgid": 10, "read": 1, "audience": 1}}})
	}
	c.write(map[string]any{"op": "receipts", "gid": "g", "counts": []any{map[string]any{"msgid": 10, "read": 1, "audience": 1}}})
	b.WaitUntil("g's count shown", browsertest.ReceiptOf("m10")+` === 'read by 1'`)
	droppedQuietly(t, b, 3)
}

// Read counts of msgids the page does not hold are kept only for those
// that may yet come, a bounded number of them: every count of a group
// the page is in was kept for the life of the page.
func TestReadCountsOfMessagesNotHeldAreBounded(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	opened(c, b, "u")
	for from := 0; from < 2000; from += 200 {
		var cs []any
		for id := from; id < from+200; id++ {
			cs = append(cs, map[string]any{"msgid": id * 1000, "read": 1, "audience": 1})
		}
		c.write(map[string]any{"op": "receipts", "gid": "g", "counts": cs})
	}
	c.write(map[string]any{"op": "receipts", "gid": "g", "counts": []any{map[string]any{"msgid": 10, "read": 1, "audience": 1}}})
	b.WaitUntil("g's count shown", browsertest.ReceiptOf("m10")+` === 'read by 1'`)
	if n := browsertest.Eval[int](b, `chat.group('g').counts.size`); n > 202 {
		t.Errorf("the page keeps %d read counts of g, which holds 2 messages", n)
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
}

// A server that serves a msgid past its head again at every pull has the
// page take the group up again and again: the page waits longer each time
// (from the second time in a row: 0.5–1 s, then 1–2 s, 2–4 s, …, after
// the 1 s its refused ack waits), says so once, and starts afresh when a
// cursor of the group is taken. It synced and pulled about once a second
// for ever, and said nothing on the page.
func TestAMsgidServedPastTheHeadAgainAndAgainBacksOff(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	p.headAt(10)
	opened(c, b, "v")
	watchWarnings(b)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(bogus, 10, "v", "bogus")}})
	var at []time.Time
	for round := 0; round < 4; round++ {
		synced(c, c.expect("sync", nil), 10, 10, 10)
		at = append(at, time.Now())
		f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
		if round < 3 {
			c.answer(f, page(f, false, 10, msg(bogus, noPrev, "v", "bogus")))
			continue
		}
		// The server has message 11, and takes its ack.
		p.headAt(11)
		c.answer(f, page(f, false, 11, msg(11, noPrev, "v", "m11")))
	}
	if gap := at[3].Sub(at[2]); gap < 2500*time.Millisecond {
		t.Errorf("the third and the fourth retake of g came %v apart, want at least 3 s (1 s + 2–4 s)", gap.Round(time.Millisecond))
	}
	b.WaitUntil("the page says so", `document.getElementById('toast').textContent.includes('asking again less often')`)
	said := 0
	for _, w := range browsertest.Eval[[]string](b, `window.warned`) {
		if strings.Contains(w, "beyond the group's head") {
			said++
		}
	}
	if said > 2 {
		t.Errorf("the page warned %d times of the refusals, want once as it began and once as it backed off", said)
	}

	// Once a cursor of g is taken, the next retake is at once.
	waitCursor(t, p, b, "ack", 11)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(bogus, 11, "v", "bogus")}})
	waitRefused(t, p, b, 4)
	refused := time.Now()
	synced(c, c.expect("sync", nil), 11, 11, 10)
	if d := time.Since(refused); d > 1500*time.Millisecond {
		t.Errorf("after the server took an ack of g, the next retake waited %v", d.Round(time.Millisecond))
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
}

// A page that names another group than the one pulled is empty: its
// messages that name no group were shown in the group pulled.
func TestAPageOfAnotherGroupIsDropped(t *testing.T) {
	_, b, c := listed(t, 11, 10, 10)
	watchWarnings(b)
	f := openG(b, c)
	other := page(f, false, 11, msg(11, noPrev, "v", "m11 of h"))
	other["gid"] = "h"
	delete(other["msgs"].([]map[string]any)[0], "gid")
	c.answer(f, other)
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 11, msg(10, noPrev, "v", "m10")))
	b.WaitUntil("m10 shown", `document.querySelectorAll('#messages .msg').length >= 1`)
	if got := b.Bodies(); len(got) != 1 || got[0] != "m10" {
		t.Errorf("g shows %q, want m10 only", got)
	}
	droppedQuietly(t, b, 1)
}

// A push whose prev is below a msgid the page holds says the group has
// no message between them: what the page holds there is another group's
// (of the same partition), taken from a push whose prev matched. It is
// taken off at once, and the push taken, or the gap to its prev pulled.
// It stayed on screen, and the push waited for a pull after it.
func TestAMsgidOfAnotherGroupIsTakenOffByTheNextPush(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	opened(c, b, "v")
	watchWarnings(b)
	bodies := `[...document.querySelectorAll('#messages .msg .body')].map((e) => e.textContent).join()`
	c.write(map[string]any{"op": "push", "msgs": []any{msg(15, 10, "v", "m15 of h")}})
	b.WaitUntil("m15 shown", bodies+` === 'm9,m10,m15 of h'`)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(20, 10, "v", "m20")}})
	b.WaitUntil("m15 taken off, m20 shown", bodies+` === 'm9,m10,m20'`)
	waitCursor(t, p, b, "ack", 20)

	// The same when the group's message before the push is one the page
	// lacks: the page pulls it.
	c.write(map[string]any{"op": "push", "msgs": []any{msg(25, 20, "v", "m25 of h")}})
	b.WaitUntil("m25 shown", bodies+` === 'm9,m10,m20,m25 of h'`)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(30, 22, "v", "m30")}})
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 20.0 })
	c.answer(f, page(f, false, 30, msg(22, noPrev, "v", "m22"), msg(30, noPrev, "v", "m30")))
	b.WaitUntil("m25 taken off, m22 and m30 shown", bodies+` === 'm9,m10,m20,m22,m30'`)
	waitCursor(t, p, b, "ack", 30)
	quietWarned(t, b, 2)
}
