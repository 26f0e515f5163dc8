package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

func TestCorkGathersWritesUntilReleasedAndPassesOthersStraightThrough(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ck := &cork{nc: a}
	got := make(chan []byte, 4)
	go func() {
		for {
			buf := make([]byte, 64)
			n, err := b.Read(buf)
			if err != nil {
				close(got)
				return
			}
			got <- buf[:n]
		}
	}()

	if _, err := ck.Write([]byte("ping")); err != nil { // uncorked: straight through
		t.Fatal(err)
	}
	if w := <-got; string(w) != "ping" {
		t.Fatalf("uncorked write arrived as %q", w)
	}
	ck.hold(context.Background())
	for _, s := range []string{"head", "er+", "payload"} {
		if _, err := ck.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case w := <-got:
		t.Fatalf("%q went out while corked", w)
	case <-time.After(20 * time.Millisecond):
	}
	if err := ck.release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := <-got; string(w) != "header+payload" {
		t.Fatalf("released as %q, want one write of header+payload", w)
	}
	if err := ck.release(context.Background()); err != nil { // not corked: nothing to do
		t.Fatal(err)
	}
}

// A client that does not read makes release fail once its ctx ends, with
// the connection closed, rather than block the writer.
func TestCorkReleaseGivesUpWhenItsContextEnds(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	ck := &cork{nc: a}
	ck.hold(context.Background())
	ck.Write(bytes.Repeat([]byte("x"), 1000))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := ck.release(ctx); err == nil {
		t.Fatal("release to a peer that never reads succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("release took %v to give up", d)
	}
	if _, err := a.Write([]byte("y")); err == nil || err == io.ErrShortWrite {
		t.Fatalf("the connection is still open after the timed-out release (write: %v)", err)
	}
}

// A batch larger than corkBufferMax leaves in pieces while corked: the cork
// holds at most corkBufferMax and the write in hand, not a second copy of
// a whole batch (up to QueueBytes) beside the queued items.
func TestCorkHoldsNoMoreThanItsBufferMax(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	got := make(chan int64)
	go func() { n, _ := io.Copy(io.Discard, b); got <- n }()
	ck := &cork{nc: a}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ck.hold(ctx)
	piece := bytes.Repeat([]byte("x"), 4<<10)
	const pieces = 64 // 256 KiB
	for range pieces {
		if _, err := ck.Write(piece); err != nil {
			t.Fatal(err)
		}
		ck.mu.Lock()
		n := len(*ck.buf)
		ck.mu.Unlock()
		if n > corkBufferMax+len(piece) {
			t.Fatalf("the cork holds %d bytes, over its %d and the write in hand", n, corkBufferMax)
		}
	}
	if err := ck.release(ctx); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if n := <-got; n != pieces*int64(len(piece)) {
		t.Fatalf("%d bytes arrived, want %d", n, pieces*len(piece))
	}
}
