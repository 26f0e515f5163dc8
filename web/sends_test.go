package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/browsertest"
)

// typeAndSend sends body from the composer of the open group.
func typeAndSend(b *browsertest.Tab, body string) {
	browsertest.Eval[bool](b, fmt.Sprintf(`(document.getElementById('composer').body.value = %q,
		document.getElementById('composer').requestSubmit(), true)`, body))
}

// Messages typed in a row are stored in the order they were typed, even
// when the first is refused for a while: each was sent at once and
// retried on its own, after a jittered pause, so the second and third
// were stored before the first. A refusal as overloaded pauses every
// send of the page, those of other groups too, as the Go SDK does.
func TestSendsInARowAreStoredInOrderAfterARefusal(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	opened(c, b, "v")
	for _, body := range []string{"one", "two", "three"} {
		typeAndSend(b, body)
	}
	f := c.expect("send", nil)
	if f["body"] != "one" {
		t.Fatalf("the first send is %v, want one", f["body"])
	}
	refused := time.Now()
	c.answer(f, map[string]any{"op": "error", "code": "overloaded", "message": "the gateway has more sends in hand than it can take in time"})
	roundTrip(t, b) // the refusal handled
	browsertest.Eval[bool](b, `(chat.outbox.send('h', 'elsewhere'), true)`)
	var stored []any
	var first time.Duration
	for msgid := 11; len(stored) < 4; msgid++ {
		f := c.next("send", 20*time.Second)
		if f == nil {
			t.Fatalf("the page sent no more after storing %v", stored)
		}
		if len(stored) == 0 {
			first = time.Since(refused)
		}
		stored = append(stored, f["body"])
		gid := f["gid"]
		c.answer(f, map[string]any{"op": "accepted", "gid": gid, "cmid": f["cmid"], "msgid": msgid})
	}
	var inG []any
	for _, s := range stored {
		if s != "elsewhere" {
			inG = append(inG, s)
		}
	}
	if fmt.Sprint(inG) != "[one two three]" {
		t.Fatalf("after one was refused as overloaded the group stored %v, in that order; want one, two, three as typed", inG)
	}
	// The Go SDK's first pause is 0.25 to 0.5 s.
	if first < 200*time.Millisecond {
		t.Fatalf("%s went out %v after a send was refused as overloaded: every send pauses", stored[0], first)
	}
}

// A send the server does not answer within its time is sent again after a
// pause that grows while the timeouts go on, as the Go SDK's does: sent
// again at once, a server too slow to answer was sent every waiting
// message again at each timeout, by every page at once. The 10 s are
// shortened to 300 ms here.
func TestResendsAfterTimeoutsBackOff(t *testing.T) {
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	shortenTimers(b, 10000, 300)
	signIn(t, p, b)
	c := p.nextConn()
	synced(c, c.expect("sync", nil), 10, 10, 10)
	b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)
	opened(c, b, "v")
	typeAndSend(b, "one")
	start := time.Now()
	n := 0
	for end := start.Add(4 * time.Second); time.Now().Before(end); {
		if f := c.next("send", time.Until(end)); f != nil {
			if f["cmid"] == nil || f["body"] != "one" {
				t.Fatalf("the page sent %v; want the message one again, under its cmid", f)
			}
			n++
		}
	}
	// Timeouts at 0.3 s, then pauses of 0.5-1 s, 1-2 s, 2-4 s: 3 or 4
	// sends in 4 s; sent again at once, about 13.
	if n < 2 || n > 5 {
		t.Fatalf("the page sent one %d times in 4 s to a server that never answers it; want it sent again after pauses that grow", n)
	}
}
