package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// Every call after Close ends at once, with ErrClosed where it fails,
// and none panics; the readers answer as of the end.
func TestCallsAfterCloseEndWithErrClosed(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	m := p.post("g1", "bob", "one")
	waitFor(t, "the message", func() bool { return rec.len() == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := map[string]func() error{
		"Send":       func() error { _, err := c.Send(ctx, "g1", "late"); return err },
		"SendWithID": func() error { _, err := c.SendWithID(ctx, "g1", "c-1", "late"); return err },
		"Open":       func() error { return c.Open(ctx, "g1") },
		"MarkRead":   func() error { return c.MarkRead(ctx, "g1", m.MsgID) },
		"ReadCounts": func() error { _, err := c.ReadCounts(ctx, "g1", []int64{m.MsgID}); return err },
		"WhoRead":    func() error { _, _, err := c.WhoRead(ctx, "g1", m.MsgID); return err },
	}
	for name, call := range calls {
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("%s after Close still blocked after 3 s", name)
		}
	}
	if acked, contig := c.Cursor("g1"); acked != m.MsgID || contig != m.MsgID {
		t.Errorf("Cursor after Close: %d, %d; want %d, %d", acked, contig, m.MsgID, m.MsgID)
	}
	if c.UID() != "alice" || len(c.Groups()) != 1 || c.Stats().Delivered != 1 {
		t.Errorf("UID %q, Groups %v, Stats %+v after Close", c.UID(), c.Groups(), c.Stats())
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close again: %v", err)
	}
}

// Close while other goroutines send, mark read, open and ask: each call
// ends (accepted, or ErrClosed), Close returns, and no goroutine is left
// (TestMain checks).
func TestCloseWhileCallsRun(t *testing.T) {
	for round := range 10 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}, "g2": {"alice", "bob"}})
			c, rec := dial(t, p, "alice", nil)
			m := p.post("g1", "bob", "one")
			waitFor(t, "the message", func() bool { return rec.len() == 1 })
			ctx := context.Background()
			calls := []func() error{
				func() error { _, err := c.Send(ctx, "g1", "hi"); return err },
				func() error { return c.MarkRead(ctx, "g1", m.MsgID) },
				func() error { return c.Open(ctx, "g2") },
				func() error { _, err := c.ReadCounts(ctx, "g1", []int64{m.MsgID}); return err }, // the peer never answers
			}
			var wg sync.WaitGroup
			errs := make(chan error, 100)
			for _, call := range calls {
				for range 3 {
					wg.Go(func() {
						for {
							if err := call(); errors.Is(err, ErrClosed) {
								return
							} else if err != nil {
								errs <- err
								return
							}
							time.Sleep(time.Millisecond) // calls, not a spin on the client's lock
						}
					})
				}
			}
			time.Sleep(time.Duration(round*10) * time.Millisecond)
			closeWithin(t, c, 3*time.Second)
			ended := make(chan struct{})
			go func() { wg.Wait(); close(ended) }()
			select {
			case <-ended:
			case <-time.After(3 * time.Second):
				t.Fatal("calls still running 3 s after Close")
			}
			close(errs)
			for err := range errs {
				t.Errorf("a call during Close: %v, want ErrClosed", err)
			}
		})
	}
}

// A Send waiting for a connection the client cannot make ends when its
// ctx does: a *SendError that wraps ctx's error, says it was not stored,
// and tells why there is no connection.
func TestASendWaitingForAReconnectEndsWithItsCtx(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, _ := dial(t, p, "alice", nil)
	p.set(func(p *peer) { p.refuse = true })
	p.kill()
	waitFor(t, "the disconnect", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.sess == nil })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Send(ctx, "g1", "hi")
	took := time.Since(start)
	var se *SendError
	if !errors.As(err, &se) || se.MaybeStored || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send: %v, want a *SendError of ctx's deadline, not stored", err)
	}
	if took > time.Second {
		t.Fatalf("Send took %v after its ctx of 200ms", took)
	}
	if n := len(p.requests(protocol.OpSend)); n != 0 {
		t.Fatalf("%d sends reached the server", n)
	}
}
