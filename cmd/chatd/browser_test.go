package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/groupchat/chatd/internal/browsertest"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the browser test's screenshot to docs/screenshot.png")

// startDev runs `chatd dev` in this process on free ports and returns its
// HTTP address once it is healthy.
func startDev(t *testing.T, extra map[string]string) string {
	t.Helper()
	httpAddr := freeAddr(t)
	env := map[string]string{
		"CHAT_HTTP_ADDR": httpAddr, "CHAT_KAFKA_LISTEN": freeAddr(t), "CHAT_DATA_DIR": t.TempDir(),
		"CHAT_PARTITIONS": "2", "CHAT_LOG_LEVEL": "warn",
	}
	for k, v := range extra {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"dev"}, func(k string) string { return env[k] }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("chatd dev: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("chatd dev did not stop within 20 s")
		}
	})
	waitHealthy(t, "http://"+httpAddr+"/healthz")
	return httpAddr
}

// TestWebClientInBrowser drives the page that chatd serves in headless
// Chromium: two users, each in a browser context of their own and behind a
// connection the test can cut, chat in a group; receipts change live; a
// user who drops off sees a banner, comes back and gets what was sent
// meanwhile, once; a message sent offline goes out once when back; history
// loads page by page as the user scrolls up. The page must log no errors.
func TestWebClientInBrowser(t *testing.T) {
	addr := startDev(t, nil)
	browser := browsertest.Start(t)
	aliceNet, bobNet := newCutProxy(t, addr), newCutProxy(t, addr)
	alice, bob := browsertest.NewTab(t, browser, "alice"), browsertest.NewTab(t, browser, "bob")

	// The console watch works: an uncaught exception is seen.
	alice.Run(chromedp.Navigate(aliceNet.url()), chromedp.Evaluate[chromedp.Void](`setTimeout(() => { throw new Error('probe') })`))
	deadline := time.Now().Add(5 * time.Second)
	for !slices.ContainsFunc(alice.Problems(), func(s string) bool { return strings.Contains(s, "probe") }) {
		if time.Now().After(deadline) {
			t.Fatal("an exception thrown in the page was not seen: the console watch is broken")
		}
		time.Sleep(20 * time.Millisecond)
	}
	alice.TakeProblems()

	signIn := func(b *browsertest.Tab, url, uid string) {
		t.Helper()
		b.Run(chromedp.Navigate(url),
			chromedp.WaitVisible(chromedp.CSS(`#signin-form input[name=uid]`)),
			chromedp.SendKeys(chromedp.CSS(`#signin-form input[name=uid]`), uid),
			chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
		b.WaitUntil("online", `document.getElementById('status').textContent === 'online'`)
	}
	signIn(alice, aliceNet.url(), "alice")
	alice.Run(
		chromedp.SendKeys(chromedp.CSS(`#new-group input[name=gid]`), "team"),
		chromedp.SendKeys(chromedp.CSS(`#new-group input[name=members]`), "bob"),
		chromedp.Click(chromedp.CSS(`#new-group button[type=submit]`)))
	alice.WaitUntil("team open", `document.getElementById('chat-title').textContent === 'team' && !chat.group('team').pulling`)
	alice.Run(chromedp.SendKeys(chromedp.CSS(`#add-member input[name=uid]`), "carol"),
		chromedp.Click(chromedp.CSS(`#add-member button[type=submit]`)))
	alice.WaitUntil("carol added", `document.getElementById('toast').textContent === 'carol was added to team'`)

	// History from before bob comes, sent over the HTTP API.
	var history []string
	for i := range 60 {
		history = append(history, fmt.Sprintf("history %02d", i))
		post(t, addr, "alice", "/v1/groups/team/messages", map[string]any{"cmid": fmt.Sprint("h-", i), "body": history[i]})
	}
	alice.WaitUntil("alice sees the history", `document.querySelectorAll('#messages .msg').length === 60`)

	// Bob signs in: counts only, no messages pulled until he opens the group.
	signIn(bob, bobNet.url(), "bob")
	bob.WaitUntil("team listed with 60 unread", `document.querySelector('#groups li[data-gid=team] .badge')?.textContent === '60'`)
	if pulls := browsertest.Eval[int](bob, `chat.stats.pulls + chat.stats.olderPulls`); pulls != 0 {
		t.Fatalf("bob's page pulled %d pages at login; messages must be pulled when a group is opened", pulls)
	}
	bob.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=team] button`)))
	bob.WaitUntil("bob has the history", `document.querySelectorAll('#messages .msg').length === 60`)
	bob.WaitUntil("the view starts at the first unread", `document.querySelector('#messages .msg.first-unread')?.dataset.msgid === document.querySelector('#messages .msg').dataset.msgid`)
	if browsertest.Eval[int](bob, `chat.group('team').readWant`) >= browsertest.Eval[int](bob, `chat.group('team').contig`) {
		t.Fatal("bob's page marked everything read before he scrolled down to it")
	}
	bob.Run(chromedp.Evaluate[chromedp.Void](`document.getElementById('scroller').scrollTop = 1e9`))
	alice.WaitUntil("bob read the history", browsertest.ReceiptOf("history 59")+` === 'read by 1'`)

	// Live: alice writes, bob reads, alice's count changes and names bob.
	alice.Run(chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "hello bob"+kb.Enter))
	alice.WaitUntil("alice's message shown as sent", `/^read by [01]$/.test(`+browsertest.ReceiptOf("hello bob")+`)`)
	bob.WaitUntil("bob gets it live", `[...document.querySelectorAll('#messages .body')].some(e => e.textContent === 'hello bob')`)
	alice.WaitUntil("read by 1 after bob saw it", browsertest.ReceiptOf("hello bob")+` === 'read by 1'`)
	alice.Run(chromedp.Click(chromedp.CSS(`#messages .msg.mine:last-child .receipt`)))
	alice.WaitUntil("the who-read list names bob, and carol as not yet",
		`!document.getElementById('readers').hidden && document.getElementById('readers-read').textContent === 'bob' &&
		 document.getElementById('readers-unread').textContent === 'carol'`)
	alice.Run(chromedp.Click(chromedp.CSS(`#readers-close`)))
	bob.Run(chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "hi alice, all caught up"+kb.Enter))
	alice.WaitUntil("alice gets bob's answer", `[...document.querySelectorAll('#messages .msg:not(.mine) .body')].some(e => e.textContent === 'hi alice, all caught up')`)
	bob.WaitUntil("bob sees alice read it", browsertest.ReceiptOf("hi alice, all caught up")+` === 'read by 1'`)

	// A group alice is added to while online shows up with its unread count.
	post(t, addr, "bob", "/v1/dev/groups", map[string]any{"gid": "lunch", "members": []string{"alice"}})
	waitFor(t, "alice in lunch", func() bool { return strings.Contains(fmt.Sprint(get(t, addr, "alice", "/v1/sync")), "gid:lunch") })
	post(t, addr, "bob", "/v1/groups/lunch/messages", map[string]any{"cmid": "l-1", "body": "lunch at noon?"})
	alice.WaitUntil("lunch listed with 1 unread", `document.querySelector('#groups li[data-gid=lunch] .badge')?.textContent === '1'`)

	// Bob drops off: a banner; alice sends; bob comes back and gets it once.
	bobNet.setCut(true)
	bob.WaitUntil("bob's banner", `!document.getElementById('banner').hidden && document.getElementById('status').textContent === 'offline'`)
	away := []string{"while you were away 1", "while you were away 2"}
	for _, s := range away {
		alice.Run(chromedp.SendKeys(chromedp.CSS(`#composer textarea`), s+kb.Enter))
		alice.WaitUntil("alice's message accepted", browsertest.ReceiptOf(s)+` === 'read by 0'`)
	}
	time.Sleep(500 * time.Millisecond)
	if got := bob.Bodies(); slices.Contains(got, away[0]) {
		t.Fatalf("bob got %q while cut off: the cut is not a cut", away[0])
	}
	bobNet.setCut(false)
	bob.WaitUntil("bob back online", `document.getElementById('banner').hidden && document.getElementById('status').textContent === 'online'`)
	bob.WaitUntil("bob resynced", fmt.Sprintf(`document.querySelectorAll('#messages .msg').length >= %d`, 64))
	for _, s := range away {
		alice.WaitUntil("bob read what he missed", browsertest.ReceiptOf(s)+` === 'read by 1'`)
	}

	// Alice drops off and sends: the message waits, then goes out once.
	aliceNet.setCut(true)
	alice.WaitUntil("alice's banner", `!document.getElementById('banner').hidden`)
	alice.Run(chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "sent while offline"+kb.Enter))
	alice.WaitUntil("the message waits in the outbox", `document.querySelector('#outbox .msg.sending')?.textContent.includes('sent while offline')`)
	aliceNet.setCut(false)
	alice.WaitUntil("the outbox empties", `document.querySelectorAll('#outbox .msg').length === 0 && document.getElementById('banner').hidden`)
	bob.WaitUntil("bob gets it", `[...document.querySelectorAll('#messages .body')].some(e => e.textContent === 'sent while offline')`)
	alice.WaitUntil("read by 1", browsertest.ReceiptOf("sent while offline")+` === 'read by 1'`)

	want := append(append(append(slices.Clone(history), "hello bob", "hi alice, all caught up"), away...), "sent while offline")
	for _, b := range []*browsertest.Tab{alice, bob} {
		if got := b.Bodies(); !slices.Equal(got, want) {
			t.Errorf("%s's page shows %d messages:\n%q\nwant each once, in order:\n%q", b.Name, len(got), got, want)
		}
	}
	stats := browsertest.Eval[map[string]int](bob, `chat.stats`)
	if stats["reconnects"] < 1 || stats["acks"] < 1 || stats["reads"] < 1 {
		t.Errorf("bob's page stats %v: want a reconnect, acks and reads", stats)
	}

	screenshot(t, alice)

	// Bob reloads: a new page knows nothing and shows only the newest
	// messages; older ones come page by page as he scrolls up.
	bob.WaitUntil("bob's acks confirmed", `chat.group('team').ack === chat.group('team').contig`)
	bob.Run(chromedp.Reload())
	bob.WaitUntil("online again", `document.getElementById('status').textContent === 'online'`)
	bob.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=team] button`)))
	bob.WaitUntil("one page shown", `document.querySelectorAll('#messages .msg').length > 0 && !chat.group('team').loadingOlder`)
	if n := len(bob.Bodies()); n >= len(want) {
		t.Fatalf("after a reload bob's page shows %d messages at once; older pages must wait for scrolling", n)
	}
	for i := 0; ; i++ {
		if !browsertest.Eval[bool](bob, `chat.group('team').olderMore`) {
			break
		}
		if i > 10 {
			t.Fatalf("scrolling up never reached the start of the group\n%s", bob.State())
		}
		n := len(bob.Bodies())
		bob.Run(chromedp.Evaluate[chromedp.Void](`document.getElementById('scroller').scrollTop = 0`))
		bob.WaitUntil("an older page", fmt.Sprintf(`document.querySelectorAll('#messages .msg').length > %d || !chat.group('team').olderMore`, n))
	}
	if got := bob.Bodies(); !slices.Equal(got, want) {
		t.Errorf("after scrolling up bob's page shows:\n%q\nwant:\n%q", got, want)
	}

	for _, b := range []*browsertest.Tab{alice, bob} {
		if p := b.TakeProblems(); len(p) > 0 {
			t.Errorf("%s's page logged errors:\n%s", b.Name, strings.Join(p, "\n"))
		}
	}
}

// post and get call the HTTP API as uid, with a dev token.
func post(t *testing.T, addr, uid, path string, body any) map[string]any {
	return call(t, addr, uid, "POST", path, body)
}

func get(t *testing.T, addr, uid, path string) map[string]any {
	return call(t, addr, uid, "GET", path, nil)
}

func call(t *testing.T, addr, uid, method, path string, body any) map[string]any {
	t.Helper()
	call := func(method, path, token string, body any) map[string]any {
		var text []byte
		if body != nil {
			text, _ = json.Marshal(body)
		}
		st, b := api(t, method, "http://"+addr+path, token, string(text))
		var out map[string]any
		json.Unmarshal(b, &out)
		if st != 200 {
			t.Fatalf("%s %s: %d %v", method, path, st, out)
		}
		return out
	}
	tok := call("POST", "/v1/dev/token", "", map[string]string{"uid": uid})["token"].(string)
	return call(method, path, tok, body)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// screenshot saves what alice sees, with the who-read list of her last
// message open, into the test's temp dir, and into docs/ with
// -update-screenshot.
func screenshot(t *testing.T, b *browsertest.Tab) {
	t.Helper()
	b.Run(chromedp.Evaluate[chromedp.Void](`document.querySelector('#messages .msg.mine:last-child').scrollIntoView({block: 'end'})`),
		chromedp.Click(chromedp.CSS(`#messages .msg.mine:last-child .receipt`)))
	b.WaitUntil("the who-read list", `!document.getElementById('readers').hidden`)
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	b.Run(chromedp.Click(chromedp.CSS(`#readers-close`)))
	dst := filepath.Join(t.TempDir(), "screenshot.png")
	if *updateScreenshot {
		dst = filepath.Join("..", "..", "docs", "screenshot.png")
	}
	if err := os.WriteFile(dst, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", dst, len(png))
}
