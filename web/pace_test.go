package web

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

// manyGroups is how many groups the pacing tests list.
const manyGroups = 300

// listedMany signs u in, with the outbox stored beforehand (JSON, or ""),
// and answers the first sync with manyGroups groups h0..., each at head
// 1, ack and read 0.
func listedMany(t *testing.T, outbox string) (*peer, *browsertest.Tab, *peerConn) {
	t.Helper()
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	b.Run(chromedp.Navigate(p.srv.URL + "/"))
	if outbox != "" {
		browsertest.Eval[bool](b, fmt.Sprintf(`(sessionStorage.setItem('chatd.outbox.u', %q), true)`, outbox))
	}
	b.Run(chromedp.SendKeys(chromedp.CSS(`#signin-form input[name=uid]`), "u"),
		chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
	c := p.nextConn()
	var gs []any
	for i := range manyGroups {
		gs = append(gs, map[string]any{"gid": fmt.Sprint("h", i), "head": 1, "ack": 0, "read": 0, "unread": 1, "unread_exact": true})
	}
	c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": gs})
	return p, b, c
}

// A message in each of 300 groups: their acks fall due together, and went
// out in one burst, over the gateway's frame rate (200 a second, bursts
// of 400, sends among them). They keep to the page's frame budget, about
// 100 a second, as the Go SDK's do.
func TestTheAcksOfManyGroupsArePaced(t *testing.T) {
	p, b, c := listedMany(t, "")
	var ms []any
	for i := range manyGroups {
		m := msg(1, 0, "v", "m1")
		m["gid"] = fmt.Sprint("h", i)
		ms = append(ms, m)
	}
	c.write(map[string]any{"op": "push", "msgs": ms})
	b.WaitUntil("every ack sent", fmt.Sprintf(`chat.stats.acks === %d`, manyGroups))
	p.mu.Lock()
	first, last := p.cursors[0].at, p.cursors[len(p.cursors)-1].at
	p.mu.Unlock()
	// At 100 a second, 300 take about 3 s.
	if took := last.Sub(first); took < 2*time.Second {
		t.Fatalf("the page sent %d acks in %v, %.0f a second; want about 100 a second at most", manyGroups, took, manyGroups/took.Seconds())
	}
}

// Sends stored in 300 groups are resent by the next session a few at a
// time, not all at once.
func TestResendsOfManyGroupsAreFewAtATime(t *testing.T) {
	var stored []map[string]any
	for i := range manyGroups {
		stored = append(stored, map[string]any{"gid": fmt.Sprint("h", i), "cmid": fmt.Sprint("w-", i), "body": "hi"})
	}
	js, _ := json.Marshal(stored)
	_, _, c := listedMany(t, string(js))
	n := 0
	for c.next("send", 500*time.Millisecond) != nil { // none answered
		n++
	}
	if n > 16 {
		t.Fatalf("the page has %d sends in flight at once; want a few, the rest waiting", n)
	}
}
