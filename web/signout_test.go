package web

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

// Signing out and in again (another person at the same browser) must not
// show the group the last user had open: the messages, the outbox and
// the group's header and the draft stayed on the page until the next user opened a
// group of their own.
func TestTheNextSignInDoesNotShowTheLastUsersGroup(t *testing.T) {
	p, b, c := listed(t, 12, 10, 10)
	f := openG(b, c)
	c.answer(f, page(f, false, 12, msg(11, -2, "v", "secret 11"), msg(12, -2, "v", "secret 12")))
	b.WaitUntil("the messages shown", `document.querySelectorAll('#messages .msg').length === 2`)
	browsertest.Eval[bool](b, `(document.getElementById('composer').body.value = 'a draft', true)`)
	b.Run(chromedp.Click(chromedp.CSS(`#signout`)))
	// The same tab, no reload: the form is right there.
	browsertest.Eval[bool](b, `(document.querySelector('#signin-form input[name=uid]').value = 'u', true)`)
	b.Run(chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
	c = p.nextConn()
	c.expect("sync", nil) // not answered: the new session has no group yet
	b.WaitUntil("signed in again", `!document.getElementById('app').hidden`)
	shown := browsertest.Eval[[]string](b, `[...document.querySelectorAll('#chat-title, #messages .body, #outbox .body')].filter(e => e.offsetParent !== null).map(e => e.textContent)`)
	shown = append(shown, browsertest.Eval[string](b, `document.getElementById('composer').body.value`))
	if len(shown) > 1 || shown[0] != "" {
		t.Fatalf("after signing out and in again the page shows the last user's %q", shown)
	}
}
