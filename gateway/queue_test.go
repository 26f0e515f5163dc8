package gateway

import (
	"sync"
	"testing"
	"time"
)

// TestOutQueue: items are written in order by one writer at a time, a full
// queue refuses, and stop waits for the writer and drops the rest.
func TestOutQueue(t *testing.T) {
	q := outQueue{limit: 4}
	var (
		mu      sync.Mutex
		got     []string
		running int
	)
	release := make(chan struct{})
	write := func(items []out) bool {
		mu.Lock()
		running++
		if running > 1 {
			t.Error("two writers at once")
		}
		mu.Unlock()
		<-release
		mu.Lock()
		defer mu.Unlock()
		running--
		for _, it := range items {
			got = append(got, string(it.frame))
		}
		return true
	}
	entered := make(chan struct{})
	var once sync.Once
	first := func(items []out) bool { once.Do(func() { close(entered) }); return write(items) }
	if !q.put(out{frame: []byte("a")}, first) {
		t.Fatal("put a refused")
	}
	<-entered
	for _, f := range []string{"b", "c", "d", "e"} {
		if !q.put(out{frame: []byte(f)}, write) {
			t.Fatalf("put %s refused", f)
		}
	}
	// "a" is with the writer; b..e fill the queue: the next is refused.
	if q.put(out{frame: []byte("f")}, write) {
		t.Fatal("a full queue accepted another item")
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("written %v, want a..e", got)
		}
		time.Sleep(time.Millisecond)
	}
	if want := "abcde"; joined(got) != want {
		t.Fatalf("written in order %q, want %q", joined(got), want)
	}
	q.stop()
	if !q.put(out{frame: []byte("g")}, write) {
		t.Fatal("after stop: put must drop quietly")
	}
	if q.writing || len(q.items) != 0 {
		t.Fatalf("after stop: writing %v, %d items", q.writing, len(q.items))
	}
}

func joined(ss []string) string {
	var s string
	for _, x := range ss {
		s += x
	}
	return s
}
