package web

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/groupchat/chatd/internal/browsertest"
)

// manyGroups is how many groups the pacing tests list.
const manyGroups = 300

// listedMany signs u in, with the outbox stored beforehand (JSON, or ""),
// and answers the first sync with manyGroups groups h0..., each at head
// 1, ack and read 0.
func listedMany(t *testing.T, outbox string) (*peer, *browsertest.Tab, *peerConn) {
	return listedGroups(t, outbox, hGroups(manyGroups, 1, 0))
}

// listedGroups signs u in, with the outbox stored beforehand (JSON, or
// ""), and answers the first sync with groups.
func listedGroups(t *testing.T, outbox string, groups []any) (*peer, *browsertest.Tab, *peerConn) {
	t.Helper()
	return listedBy(t, newPeer(t), outbox, groups)
}

// listedBy is listedGroups with the peer p.
func listedBy(t *testing.T, p *peer, outbox string, groups []any) (*peer, *browsertest.Tab, *peerConn) {
	t.Helper()
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	b.Run(chromedp.Navigate(p.srv.URL + "/"))
	if outbox != "" {
		browsertest.Eval[bool](b, fmt.Sprintf(`(sessionStorage.setItem('chatd.outbox.u', %q), true)`, outbox))
	}
	b.Run(chromedp.SendKeys(chromedp.CSS(`#signin-form input[name=uid]`), "u"),
		chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
	c := p.nextConn()
	c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": groups})
	return p, b, c
}

// hGroups is a sync's groups h0 to h(n-1), each at head, with its ack and
// read cursors at cursor.
func hGroups(n int, head, cursor int64) []any {
	gs := make([]any, n)
	for i := range gs {
		gs[i] = map[string]any{"gid": fmt.Sprint("h", i), "head": head, "ack": cursor, "read": cursor, "unread": head - cursor, "unread_exact": true}
	}
	return gs
}

// A message in each of 300 groups: their acks fall due together, and went
// out in one burst, over the gateway's frame rate (200 a second, bursts
// of 400, sends among them). They keep to the page's frame budget, about
// 100 a second, as the Go SDK's do.
func TestTheAcksOfManyGroupsArePaced(t *testing.T) {
	p, b, c := listedMany(t, "")
	pushToEveryGroup(c)
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

// Who read a message, asked 300 times in a row (a user clicking "read
// by" rapidly), and syncs, asked again and again (a server sending resync
// frame after resync frame): they went out as they were asked, past the
// page's frame budget and, with acks and reads alongside, past the
// gateway's frame rate. They keep to the budget, about 100 a second.
func TestWhoReadAndSyncsArePaced(t *testing.T) {
	t.Run("who read", func(t *testing.T) {
		_, b, c := listed(t, 10, 10, 10)
		opened(c, b, "u")
		browsertest.Eval[bool](b, `((r) => { for (let i = 0; i < 300; i++) r.click(); return true })(
			document.querySelector('#messages .msg[data-msgid="10"] .receipt'))`)
		n, took := answerAll(c, "who_read", func(f map[string]any) map[string]any {
			return map[string]any{"op": "readers", "gid": "g", "msgid": 10, "read": []any{}, "unread": []any{"v"}}
		})
		paced(t, "who_read", n, 300, took)
	})
	t.Run("resync", func(t *testing.T) {
		_, _, c := listed(t, 10, 10, 10)
		// One every 2 ms for a second: sent together, the page's timers
		// would make them one sync.
		go func() {
			for range 500 {
				c.write(map[string]any{"op": "resync", "reason": "push_route"})
				time.Sleep(2 * time.Millisecond)
			}
		}()
		n, took := answerAll(c, "sync", func(f map[string]any) map[string]any {
			return map[string]any{"op": "synced", "groups": []any{
				map[string]any{"gid": "g", "head": 10, "ack": 10, "read": 10, "unread": 0, "unread_exact": true}}}
		})
		paced(t, "sync", n, 50, took)
	})
}

// answerAll answers every frame of op the page sends, with answer(f),
// until none comes for a second, and returns how many came and the time
// from the first to the last.
func answerAll(c *peerConn, op string, answer func(f map[string]any) map[string]any) (int, time.Duration) {
	var first, last time.Time
	n := 0
	for f := c.next(op, time.Second); f != nil; f = c.next(op, time.Second) {
		if last = time.Now(); n == 0 {
			first = last
		}
		n++
		c.answer(f, answer(f))
	}
	return n, last.Sub(first)
}

// paced fails t unless the n frames of op (at least least) that took took
// kept to about 100 a second, past a burst of 20.
func paced(t *testing.T, op string, n, least int, took time.Duration) {
	t.Helper()
	if n < least {
		t.Fatalf("the page sent %d %s frames; want at least %d", n, op, least)
	}
	if want := time.Duration(float64(n-20) / 100 * 0.7 * float64(time.Second)); took < want {
		t.Fatalf("the page sent %d %s frames in %v, %.0f a second; want about 100 a second at most", n, op, took, float64(n)/took.Seconds())
	}
}

// The session's first sync, which the page waits on to be online, does
// not wait behind the frames queued in the budget before the connection
// was lost: 300 acks flushed at once (as closing a group does), about 3 s
// of them.
func TestTheFirstSyncOfASessionGoesBeforeQueuedAcks(t *testing.T) {
	p, b, c := listedMany(t, "")
	// Flushed as soon as they are taken, before the acks' own timer.
	browsertest.Eval[bool](b, fmt.Sprintf(`(() => {
		const t = setInterval(() => {
			if (chat.stats.pushes === %d) clearInterval(t), chat.cursors.flush(true);
		}, 5);
		return true;
	})()`, manyGroups))
	pushToEveryGroup(c)
	b.WaitUntil("the acks queued", `chat.pace.queue.length > 200`)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	c = p.nextConn()
	up := time.Now()
	f := c.expect("sync", nil)
	if d := time.Since(up); d > 500*time.Millisecond {
		t.Errorf("the first sync of the new session came %v after it was up, behind the acks queued before (%d sent by then); want it first",
			d, browsertest.Eval[int](b, `chat.stats.acks`))
	}
	c.answer(f, map[string]any{"op": "synced", "groups": []any{}})
}

// pushToEveryGroup pushes message 1 of each of manyGroups groups in one
// frame: their acks fall due together.
func pushToEveryGroup(c *peerConn) { pushToGroups(c, manyGroups) }

// pushToGroups pushes message 1 of each of n groups h0... in one frame.
func pushToGroups(c *peerConn, n int) {
	var ms []any
	for i := range n {
		m := msg(1, 0, "v", "m1")
		m["gid"] = fmt.Sprint("h", i)
		ms = append(ms, m)
	}
	c.write(map[string]any{"op": "push", "msgs": ms})
}

// A sync of many groups costs the gateway's frame rate one frame more for
// each 100 groups it lists (and who read one more for each 500 ids): a
// page that counted it as one frame, resyncing often in a user's 500
// groups, went past the gateway's rate, which then refused its frames,
// its sends among them. The page charges its own budget as the gateway
// does: syncs of 500 groups (6 frames each) go about 16 a second at most.
func TestSyncsOfManyGroupsArePacedByWhatTheyCost(t *testing.T) {
	_, _, c := listed(t, 10, 10, 10)
	gs := hGroups(500, 1, 1)
	go func() {
		for range 1000 {
			c.write(map[string]any{"op": "resync", "reason": "push_route"})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	n, took := answerAll(c, "sync", func(f map[string]any) map[string]any {
		return map[string]any{"op": "synced", "groups": gs}
	})
	if n < 5 {
		t.Fatalf("the page sent %d syncs while asked for 2 s; want them paced, not stopped", n)
	}
	// 6 frames each at 100 frames a second, after a burst of 20 frames.
	if want := time.Duration(float64(6*n-20) / 100 * 0.7 * float64(time.Second)); took < want {
		t.Fatalf("the page sent %d syncs of 500 groups in %v, %.0f a second; want at most about 16 a second (6 frames each at 100 frames a second)", n, took, float64(n)/took.Seconds())
	}
}
