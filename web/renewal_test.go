package web

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

// renewing signs u in on a peer whose second dev token request waits for
// release and then answers with answer, ends the session with
// token_expired, and returns once the page asked for that token.
func renewing(t *testing.T, answer http.HandlerFunc) (p *peer, b *browsertest.Tab, release func()) {
	t.Helper()
	var calls atomic.Int32
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	p = newPeerTokens(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 2 {
			<-ch
			answer(w, r)
			return
		}
		w.Write([]byte(`{"uid":"u","token":"t"}`))
	})
	t.Cleanup(release) // before the server's Close waits for the request
	b = browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	c := p.nextConn()
	synced(c, c.expect("sync", nil), 10, 10, 10)
	b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)
	c.ws.Close(4001, "token_expired: the token expired; get a new one")
	for deadline := time.Now().Add(10 * time.Second); calls.Load() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the page did not ask for a new dev token after token_expired")
		}
	}
	return p, b, release
}

// A dev token that expired is renewed by asking for a new one. A user who
// signs out while that request is under way stays signed out: the answer
// must not store the session again (a reload would sign them back in).
func TestSigningOutDuringATokenRenewalSticks(t *testing.T) {
	_, b, release := renewing(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"uid":"u","token":"t"}`))
	})
	b.Run(chromedp.Click(chromedp.CSS(`#signout`)))
	b.WaitUntil("the sign-in form", `!document.getElementById('signin').hidden`)
	renewed := watchTokenAnswer(b)
	release()
	renewed()
	if s := browsertest.Eval[string](b, `sessionStorage.getItem('chatd.session') || ''`); s != "" {
		t.Fatalf("signed out, yet the renewal stored the session again: %s (a reload signs the user back in)", s)
	}
	if browsertest.Eval[bool](b, `document.getElementById('signin').hidden`) {
		t.Fatalf("signed out, yet the page left the sign-in form: %s", b.State())
	}
}

// The same renewal, failing after the user signed out and in again: the
// first session's end must not sign out the second.
func TestARenewalOfAnEndedSessionLeavesTheNextAlone(t *testing.T) {
	p, b, release := renewing(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"code":"unavailable","message":"restarting"}`, http.StatusServiceUnavailable)
	})
	b.Run(chromedp.Click(chromedp.CSS(`#signout`)))
	b.WaitUntil("the sign-in form", `!document.getElementById('signin').hidden`)
	b.Run(chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`))) // the name is still filled in
	c := p.nextConn()
	synced(c, c.expect("sync", nil), 10, 10, 10)
	b.WaitUntil("online again", `document.getElementById('status').textContent === 'online'`)
	renewed := watchTokenAnswer(b)
	release()
	renewed()
	if browsertest.Eval[bool](b, `!document.getElementById('signin').hidden || window.chat?.online !== true`) {
		t.Fatalf("the failed renewal of the signed-out session signed out the new one: %s", b.State())
	}
}

// watchTokenAnswer has the page note when it has handled the answer to its
// next dev token request, and returns a func that waits for that. The
// renewal takes the answer in promise callbacks that all run before the
// timer the note is set by: once it is set, the renewal has ended.
func watchTokenAnswer(b *browsertest.Tab) func() {
	browsertest.Eval[bool](b, `(() => {
		const json = Response.prototype.json;
		Response.prototype.json = function () {
			const p = json.call(this);
			if (this.url.endsWith('/v1/dev/token')) {
				Response.prototype.json = json;
				const note = () => setTimeout(() => { window.tokenAnswered = true; });
				p.then(note, note);
			}
			return p;
		};
		return true;
	})()`)
	return func() { b.WaitUntil("the token's answer handled", `window.tokenAnswered === true`) }
}

// A dev server whose every token is refused as bad_token: the page renews
// the token and dials again, but the redials must back off.
func TestARefusedRenewedTokenBacksOff(t *testing.T) {
	var calls atomic.Int32
	p := newPeerTokens(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Write([]byte(`{"uid":"u","token":"refused"}`))
	})
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	time.Sleep(4 * time.Second)
	if n := calls.Load(); n > 8 {
		t.Fatalf("in 4 s the page asked for %d tokens and dialled as often: the redials after bad_token do not back off", n)
	}
}
