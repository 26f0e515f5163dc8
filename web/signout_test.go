package web

import (
	"net/http"
	"strings"
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

// On a server that hands out no dev tokens the user pastes one. Signing
// out must not leave it in the form for the next person at this browser,
// shown in clear and signing them in as the last user at a click.
func TestSigningOutLeavesNoTokenInTheForm(t *testing.T) {
	p := newPeerTokens(t, http.NotFound)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	b.Run(chromedp.Navigate(p.srv.URL+"/"),
		chromedp.SendKeys(chromedp.CSS(`#signin-form input[name=uid]`), "u"),
		chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
	b.WaitUntil("the token field", `!document.getElementById('token-field').hidden`)
	b.Run(chromedp.SendKeys(chromedp.CSS(`#signin-form input[name=token]`), "t"),
		chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
	c := p.nextConn()
	synced(c, c.expect("sync", nil), 10, 10, 10)
	b.WaitUntil("online", `document.getElementById('status').textContent === 'online'`)
	b.Run(chromedp.Click(chromedp.CSS(`#signout`)))
	b.WaitUntil("the sign-in form", `!document.getElementById('signin').hidden`)
	if tok := browsertest.Eval[string](b, `document.querySelector('#signin-form input[name=token]').value`); tok != "" {
		t.Fatalf("after signing out the sign-in form still holds the last user's token %q", tok)
	}
}

// The token goes in the first frame, not in the WebSocket URL, where the
// access logs of proxies keep it. Signing out takes the unsent outbox
// with it: the next person at this browser signing in as the same user
// sent the last one's messages.
func TestTheTokenStaysOutOfTheURLAndSigningOutForgetsTheOutbox(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	p.mu.Lock()
	url := p.urls[0]
	p.mu.Unlock()
	if strings.Contains(url, "token") {
		t.Errorf("the page put its token in the WebSocket URL (%s), where access logs keep it", url)
	}
	opened(c, b, "v")
	typeAndSend(b, "not sent yet")
	c.expect("send", nil) // not answered
	b.Run(chromedp.Click(chromedp.CSS(`#signout`)))
	b.WaitUntil("the sign-in form", `!document.getElementById('signin').hidden`)
	if stored := browsertest.Eval[[]string](b, `Object.keys(sessionStorage).filter((k) => k.startsWith('chatd.'))`); len(stored) > 0 {
		t.Fatalf("after signing out sessionStorage still holds %q: the next sign-in sends the last user's unsent messages", stored)
	}
}
