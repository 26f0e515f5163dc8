package web

import (
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A sync refused after the session is up (Redis down: unavailable) makes
// the page drop and redial. The backoff must grow across such sessions:
// being let in (authed) is not a healthy session, a sync is.
func TestRefusedSyncsBackOff(t *testing.T) {
	n := sessionsIn8s(t, func(c *peerConn, sync map[string]any) {
		c.answer(sync, map[string]any{"op": "error", "code": "unavailable", "message": "redis: connection refused"})
	})
	// Backoff 0.5, 1, 2, 4 s (each jittered to [d/2, d]) allows 5 sessions in 8 s.
	if n > 6 {
		t.Fatalf("%d sessions (WebSocket upgrades, auth, sync) in 8 s while the server's store is down", n)
	}
}

// A server that answers the sync and then cuts the connection (4008, too
// slow) on every session: the page took the sync for a healthy session and
// redialled from the shortest delay each time, two to four times a second
// for ever. Only a session that lasted the longest delay starts it over.
func TestCutsRightAfterTheSyncBackOff(t *testing.T) {
	n := sessionsIn8s(t, func(c *peerConn, sync map[string]any) {
		synced(c, sync, 10, 10, 10)
		time.Sleep(50 * time.Millisecond)
		c.ws.Close(4008, "too slow")
	})
	// Backoff 0.5, 1, 2, 4 s (each jittered to [d/2, d]), each after a
	// session up to 2 s more: at most 5 sessions in 8 s.
	if n > 6 {
		t.Fatalf("%d sessions in 8 s with a server that cuts each right after its sync", n)
	}
}

// sessionsIn8s signs a page in and counts the sessions it opens in 8 s,
// each answered by end once its sync comes.
func sessionsIn8s(t *testing.T, end func(c *peerConn, sync map[string]any)) int {
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	n := 0
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		var c *peerConn
		select {
		case c = <-p.conns:
		case <-time.After(time.Until(deadline)):
			continue
		}
		n++
		if f := c.next("sync", 5*time.Second); f != nil {
			end(c, f)
		}
	}
	return n
}
