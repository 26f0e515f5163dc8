package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// A bot closes its client on a message that says so. Close, called from
// OnMessage, returns at once; once OnMessage returns, the client acks
// what was delivered, that message included (or the next client of the
// user would be handed it, and close, again), and delivers nothing more.
// Calls from the callback after Close end with ErrClosed.
func TestCloseFromOnMessageAcksWhatWasDeliveredAndStopsDelivery(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	dialled, release := make(chan struct{}), make(chan struct{})
	closed, sent := make(chan error, 1), make(chan error, 1)
	var c *Client
	c, rec := dial(t, p, "alice", func(cfg *Config) {
		cfg.AckEvery, cfg.AckInterval = 1000, time.Hour // nothing acked before Close
		show := cfg.OnMessage
		cfg.OnMessage = func(m protocol.Message) {
			show(m)
			if m.Body != "quit" {
				return
			}
			<-dialled
			<-release // the next message waits for OnMessage
			closed <- c.Close()
			_, err := c.Send(context.Background(), m.Gid, "bye")
			sent <- err
		}
	})
	close(dialled)
	p.post("g1", "bob", "one")
	quit := p.post("g1", "bob", "quit")
	p.post("g1", "bob", "after")
	waitFor(t, "the message after quit received", func() bool { return c.Stats().Pushes == 3 })
	close(release)

	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from OnMessage: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close from OnMessage still blocked after 3 s: it waits for OnMessage to return")
	}
	if err := <-sent; !errors.Is(err, ErrClosed) {
		t.Fatalf("Send from OnMessage after its Close: %v, want ErrClosed", err)
	}
	select {
	case <-c.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("Done not closed 3 s after the Close from OnMessage")
	}
	if err := closeWithin(t, c, 3*time.Second); err != nil {
		t.Fatalf("Close from the test after the one from OnMessage: %v", err)
	}
	if got := p.cursors("ack", "g1", "alice"); !slices.Equal(got, []int64{quit.MsgID}) {
		t.Fatalf("acks %v after the Close from OnMessage, want one up to the quit message, %d", got, quit.MsgID)
	}
	if got := rec.bodies("g1"); !slices.Equal(got, []string{"one", "quit"}) {
		t.Fatalf("delivered %q, want one and quit: nothing after the Close", got)
	}
}

// Close from OnError or OnReceipts returns at once too: those come from
// the goroutines Close waits for (the run loop, the ack loop, the read
// loop). The pending acks are still sent, once the callback returns.
func TestCloseFromOnErrorOrOnReceiptsDoesNotWaitForItself(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(cfg *Config, closeOnce func())
		cause func(p *peer)
		acked bool // the pending ack is sent by Close
	}{
		{"OnError of a disconnect", func(cfg *Config, closeOnce func()) {
			cfg.OnError = func(error) { closeOnce() }
		}, func(p *peer) {
			p.set(func(p *peer) { p.refuse = true })
			p.kill()
		}, false},
		{"OnError of an ack refused", func(cfg *Config, closeOnce func()) {
			cfg.AckEvery = 1
			cfg.OnError = func(error) { closeOnce() }
		}, func(p *peer) {
			p.set(func(p *peer) { delete(p.groups["g1"].members, "alice") }) // acks refused as not_member
			p.pushRaw("alice", p.post("g1", "bob", "two"))
		}, false},
		{"OnReceipts", func(cfg *Config, closeOnce func()) {
			cfg.OnReceipts = func(protocol.Receipts) { closeOnce() }
		}, func(p *peer) {
			for _, pc := range p.connsOf("alice") {
				p.write(pc, []byte(`{"op":"receipts","gid":"g1","counts":[{"msgid":1,"read":1}]}`))
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
			dialled, closed := make(chan struct{}), make(chan error, 1)
			var once sync.Once
			var c *Client
			c, rec := dial(t, p, "alice", func(cfg *Config) {
				cfg.AckInterval = time.Hour
				cfg.AckEvery = 1000
				tc.setup(cfg, func() { once.Do(func() { <-dialled; closed <- c.Close() }) })
			})
			close(dialled)
			one := p.post("g1", "bob", "one")
			waitFor(t, "the first message", func() bool { return rec.len() == 1 })
			tc.cause(p)
			select {
			case <-closed:
			case <-time.After(3 * time.Second):
				t.Fatalf("Close from %s still blocked after 3 s", tc.name)
			}
			err := closeWithin(t, c, 3*time.Second)
			if tc.acked {
				if err != nil {
					t.Fatalf("Close after the one from %s: %v", tc.name, err)
				}
				if got := p.cursors("ack", "g1", "alice"); !slices.Equal(got, []int64{one.MsgID}) {
					t.Fatalf("acks %v, want the pending one up to %d", got, one.MsgID)
				}
			}
		})
	}
}

// Close from another goroutine while OnMessage runs still waits for it to
// return, and acks its message: only the callback's own goroutine is let
// off waiting.
func TestCloseFromAnotherGoroutineWaitsForOnMessage(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	entered, release := make(chan struct{}), make(chan struct{})
	c, _ := dial(t, p, "alice", func(cfg *Config) {
		cfg.AckEvery, cfg.AckInterval = 1000, time.Hour
		cfg.OnMessage = func(protocol.Message) { close(entered); <-release }
		cfg.OnError = func(err error) { t.Errorf("OnError: %v", err) }
	})
	m := p.post("g1", "bob", "slow")
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while OnMessage runs", err)
	case <-c.Done():
		t.Fatal("Done closed while OnMessage runs")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if got := p.cursors("ack", "g1", "alice"); !slices.Equal(got, []int64{m.MsgID}) {
		t.Fatalf("acks %v, want [%d]", got, m.MsgID)
	}
}

// closeWithin closes c and fails t when Close is still blocked after d.
func closeWithin(t *testing.T, c *Client, d time.Duration) error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		return err
	case <-time.After(d):
		var b bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("Close still blocked after %v\n%s", d, b.String())
		return nil
	}
}

// A server gone silent (no answers, no pongs, no close frame: a peer gone
// without a FIN) holds Close no longer than RequestTimeout, the bound of
// its flush: the acks not answered make Close's error, and the connection
// is dropped, not closed with a handshake that waits 5 s for the server's
// close frame. With nothing to flush, a ping tells the silence.
func TestCloseOfASilentServerIsBoundedByRequestTimeout(t *testing.T) {
	for _, pending := range []bool{true, false} {
		t.Run(fmt.Sprint("an ack pending: ", pending), func(t *testing.T) {
			p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
			c, rec := dial(t, p, "alice", func(cfg *Config) {
				cfg.AckEvery, cfg.AckInterval = 1000, time.Hour
				if !pending {
					cfg.AckEvery = 1
				}
				cfg.RequestTimeout = 300 * time.Millisecond
			})
			m := p.post("g1", "bob", "one")
			waitFor(t, "the message", func() bool { return rec.len() == 1 })
			if !pending {
				waitFor(t, "its ack", func() bool { return len(p.cursors("ack", "g1", "alice")) == 1 })
			}
			p.set(func(p *peer) { p.silentAfter = 1 })
			p.kill() // the client reconnects to a connection that goes silent after its sync
			waitFor(t, "the reconnect", func() bool { return c.Stats().Reconnects == 1 })
			start := time.Now()
			err := c.Close()
			if took := time.Since(start); took > time.Second {
				t.Fatalf("Close of a silent server took %v, want about RequestTimeout (300ms)", took.Round(time.Millisecond))
			}
			if pending && err == nil {
				t.Fatal("Close of a silent server: no error, but its ack was not answered")
			}
			if !pending && err != nil {
				t.Fatalf("Close with nothing to flush: %v", err)
			}
			if got := p.cursors("ack", "g1", "alice"); pending && len(got) != 0 || !pending && !slices.Equal(got, []int64{m.MsgID}) {
				t.Fatalf("acks %v", got)
			}
		})
	}
}
