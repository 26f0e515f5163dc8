package testserver

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Goroutines is the set of goroutines running at one moment, to tell which
// of those running later started after it.
type Goroutines map[string]bool

// GoroutinesNow takes the set of goroutines running now.
func GoroutinesNow() Goroutines {
	g := Goroutines{}
	for _, s := range stacks() {
		g[goroutineID(s)] = true
	}
	return g
}

// Since returns the stacks of the goroutines that started after g was
// taken, still run and have frame in their stack.
func (g Goroutines) Since(frame string) []string {
	var found []string
	for _, s := range stacks() {
		if !g[goroutineID(s)] && strings.Contains(s, frame) {
			found = append(found, s)
		}
	}
	return found
}

// WaitGone fails tb unless, within d, every goroutine that started after g
// was taken and has frame in its stack has ended.
func (g Goroutines) WaitGone(tb testing.TB, frame string, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		left := g.Since(frame)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d goroutine(s) running %s still there %v after: the first:\n%s", len(left), frame, d, left[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stacks are the stacks of every goroutine, one a string.
func stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, s := range bytes.Split(buf, []byte("\n\n")) {
		out = append(out, string(s))
	}
	return out
}

// goroutineID is the number of "goroutine 12 [running]:".
func goroutineID(stack string) string {
	s := strings.TrimPrefix(stack, "goroutine ")
	if i := strings.IndexByte(s, ' '); i > 0 {
		return s[:i]
	}
	return s
}
