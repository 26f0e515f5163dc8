package client

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// A server that pushes, after every sync, a msgid it then refuses as
// beyond_head has the group taken up again and again. From the second
// time in a row the client waits before it syncs (1 s, doubling up to a
// minute) and says so once; a cursor of the group accepted makes the next
// retake sync at once again. Without the wait the client synced all its
// groups as fast as the server answered (about once an AckInterval with
// the default AckEvery), for ever.
func TestRetakesInARowWaitLongerBeforeTheirSync(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	var keeps atomic.Int32
	var mu sync.Mutex
	var refusals []string
	c, rec := dial(t, p, "alice", func(cfg *Config) {
		cfg.AckEvery = 1
		cfg.OnError = func(err error) {
			t.Logf("OnError: %v", err)
			if strings.Contains(err.Error(), "keeps sending") {
				keeps.Add(1)
			}
			if strings.Contains(err.Error(), string(protocol.CodeBeyondHead)) {
				mu.Lock()
				refusals = append(refusals, err.Error())
				mu.Unlock()
			}
		}
	})
	m1 := p.post("g1", "bob", "one")
	waitFor(t, "the ack of the first", func() bool { a, _ := c.Cursor("g1"); return a == m1.MsgID })
	bogus := func(prev int64) protocol.Message {
		return protocol.Message{Gid: "g1", MsgID: 1 << 62, Prev: &prev, Sender: "bob", Body: "bogus"}
	}
	p.set(func(p *peer) {
		p.afterSync = func(string) []protocol.Message { return []protocol.Message{bogus(m1.MsgID)} }
	})
	syncs := len(p.requests(protocol.OpSync))
	p.pushRaw("alice", bogus(m1.MsgID))
	waitFor(t, "the first retake", func() bool { return c.Stats().Retakes >= 1 })

	// The first retake syncs at once, the second after 0.5 to 1 s, the
	// third after 1 to 2 s more.
	time.Sleep(1500 * time.Millisecond)
	if n := len(p.requests(protocol.OpSync)) - syncs; n > 3 {
		t.Fatalf("%d syncs in 1.5 s of a server pushing a msgid it refuses after every sync; want at most 3", n)
	}
	waitFor(t, "the third retake", func() bool { return c.Stats().Retakes >= 3 })
	st := c.Stats()
	if st.RetakesWaited < 2 || keeps.Load() != 1 {
		t.Fatalf("%d retakes, %d of them waited, said %d times that the server keeps sending them; want 2 waited at least, said once",
			st.Retakes, st.RetakesWaited, keeps.Load())
	}

	// The server stops: a real message is taken and acked, and the next
	// refusal is the first in a row again.
	p.set(func(p *peer) { p.afterSync = nil })
	m3 := p.post("g1", "bob", "three")
	waitFor(t, "the ack of the third", func() bool { a, _ := c.Cursor("g1"); return a == m3.MsgID })
	st = c.Stats()
	mu.Lock()
	before := len(refusals)
	mu.Unlock()
	p.pushRaw("alice", bogus(m3.MsgID))
	waitFor(t, "the refusal after an accepted ack", func() bool { mu.Lock(); defer mu.Unlock(); return len(refusals) > before })
	mu.Lock()
	last := refusals[before]
	mu.Unlock()
	if after := c.Stats(); after.RetakesWaited != st.RetakesWaited || !strings.HasSuffix(last, "taking the group up again from the ack cursor") {
		t.Fatalf("the retake after an accepted ack (%d waited, %d before): %q; want it synced at once", after.RetakesWaited, st.RetakesWaited, last)
	}
	if !slices.Contains(rec.bodies("g1"), "three") {
		t.Fatalf("delivered %q, without the third", rec.bodies("g1"))
	}
}
