// Package browsertest drives chatd's web page in headless Chromium for
// tests: one browser per test, one tab per user, each in a browser context
// of its own (its own storage and connections), with the page's console
// watched for errors. A Tab is used by one goroutine.
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Start starts one headless Chromium for the test and stops it when the test
// ends. It fails, never skips, when none is installed. CHROMIUM names the
// binary; else chromium, chromium-browser or google-chrome from PATH.
func Start(t *testing.T) context.Context {
	t.Helper()
	bin := os.Getenv("CHROMIUM")
	if bin == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				bin = p
				break
			}
		}
	}
	if bin == "" {
		t.Fatal("no Chromium to run the browser test: install it with `make deps` (apt-get install chromium) or set CHROMIUM")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 760),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	return browser
}

// Tab is one user's page.
type Tab struct {
	Name string
	Ctx  context.Context

	t *testing.T

	mu       sync.Mutex
	problems []string // uncaught exceptions and console.error calls of the page
}

// NewTab opens a tab in a new browser context of browser.
func NewTab(t *testing.T, browser context.Context, name string) *Tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	b := &Tab{t: t, Name: name, Ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // opens the tab
		t.Fatalf("%s: new tab: %v", name, err)
	}
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			// The browser's own log (Source set) reports the refused
			// connections the test causes; the page's errors are the rest.
			if m.IsException() || m.Type == chromedp.ConsoleError && m.Source == "" {
				b.problem(m.String())
			}
		}
	}()
	return b
}

func (b *Tab) problem(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, s)
}

// Problems returns the page's uncaught exceptions and console.error calls
// so far.
func (b *Tab) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.problems)
}

// TakeProblems returns Problems and forgets them.
func (b *Tab) TakeProblems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

// Run runs steps, failing the test on an error.
func (b *Tab) Run(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\n%s", b.Name, err, b.State())
	}
}

// Eval evaluates a JavaScript expression in b's page.
func Eval[T any](b *Tab, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("%s: %s: %v\n%s", b.Name, expr, err, b.State())
	}
	return v
}

// WaitUntil polls a JavaScript condition for up to 20 s, failing the test
// with the page's state when it does not hold by then.
func (b *Tab) WaitUntil(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: timed out waiting for %s (%s; last error %v)\n%s", b.Name, what, cond, err, b.State())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Bodies returns the texts of the open group's messages, top to bottom.
func (b *Tab) Bodies() []string {
	b.t.Helper()
	return Eval[[]string](b, `[...document.querySelectorAll('#messages .msg .body')].map(e => e.textContent)`)
}

// ReceiptOf is a JavaScript expression: the "read by N" text of my message
// with body.
func ReceiptOf(body string) string {
	return fmt.Sprintf(`[...document.querySelectorAll('#messages .msg.mine')].find(e => e.querySelector('.body').textContent === %q)?.querySelector('.receipt')?.textContent`, body)
}

// State describes the page, for a failure message.
func (b *Tab) State() string {
	ctx, cancel := context.WithTimeout(b.Ctx, 3*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		status: document.getElementById('status')?.textContent,
		banner: document.getElementById('banner')?.hidden === false ? document.getElementById('banner-text').textContent : null,
		messages: [...document.querySelectorAll('#messages .msg')].map(e => e.dataset.msgid + ' ' + e.querySelector('.body').textContent + ' ' + (e.querySelector('.receipt')?.textContent || '')),
		outbox: [...document.querySelectorAll('#outbox .msg')].map(e => e.textContent),
		toast: document.getElementById('toast')?.hidden ? null : document.getElementById('toast')?.textContent,
		stats: window.chat?.stats,
	})`))
	if err != nil {
		return fmt.Sprintf("(page state unavailable: %v)", err)
	}
	var pretty map[string]any
	json.Unmarshal([]byte(s), &pretty)
	out, _ := json.MarshalIndent(pretty, "  ", "  ")
	return "  page of " + b.Name + ": " + string(out)
}
