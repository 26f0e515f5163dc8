package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

// plain is message id of g, sent by v, as a page has it (no prev).
func plain(id int64) map[string]any { return msg(id, noPrev, "v", fmt.Sprint("m", id)) }

// openingFromRead opens g, listed with 3,000 messages all acked and 10
// read (its first unread more than 20 older pages up from the newest),
// answers the pulls of the opening as a real server does, and returns
// the pull of the page after the read cursor (Chat.fromRead), unanswered.
func openingFromRead(t *testing.T) (*peer, *browsertest.Tab, *peerConn, map[string]any) {
	t.Helper()
	p, b, c := listed(t, 3000, 3000, 10)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	for {
		f := c.expect("pull", nil)
		if f["after"] == 10.0 {
			return p, b, c, f
		}
		answerPull(c, f, 3000, plain)
	}
}

// The user sends while the page after the read cursor is asked for: its
// push brings the view to the newest (Chat.toNewest), and what lies
// between, never on screen, is not read. The view made at the newest
// joined after the read cursor still (joinsAfter), and read what it
// showed, past 11 to 2950.
func TestSendingWhileOpeningAtTheFirstUnreadReadsNothingSkipped(t *testing.T) {
	p, b, c, f := openingFromRead(t)
	typeAndSend(b, "mine")
	s := c.expect("send", nil)
	mine := msg(3001, 3000, "u", "mine")
	mine["cmid"] = s["cmid"]
	c.answer(s, map[string]any{"op": "accepted", "gid": "g", "cmid": s["cmid"], "msgid": 3001})
	c.write(map[string]any{"op": "push", "msgs": []any{mine}})
	of := func(id int64) map[string]any {
		if id == 3001 {
			return mine
		}
		return plain(id)
	}
	for ; f != nil; f = c.next("pull", 500*time.Millisecond) {
		answerPull(c, f, 3001, of)
	}
	time.Sleep(2500 * time.Millisecond) // past the read interval
	flushCursors(t, b)
	drawn := browsertest.Eval[bool](b, `!!document.querySelector('#messages .msg[data-msgid="3001"]')`)
	if read := p.maxCursor("read"); !drawn || read > 10 {
		t.Fatalf("sent while the page after the read cursor, 10, was asked for, the message is drawn: %v (the group shows %s), "+
			"and the page read up to %d; want it drawn and no read past 10, 11 to 2950 never on screen", drawn, shownRange(b), read)
	}
}
