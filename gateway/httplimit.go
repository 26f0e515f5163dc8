package gateway

import (
	"sync"

	"github.com/groupchat/chatd/protocol"
)

// maxHTTPInflight bounds a user's HTTP requests in hand at once on a
// gateway: their bodies being read, their answers being worked out or
// written.
const maxHTTPInflight = 8

// httpUsers bounds each user's HTTP requests, whatever their operation,
// as a WebSocket's frames are bounded: a bucket per user of a connection's
// frame rate, and at most maxHTTPInflight requests in hand at once, so
// that one token, over as many keep-alive connections as it likes, asks
// the stores no faster than one WebSocket may. Sends take a token of the
// send rate too. A user with no request in hand has no entry in inflight;
// rate holds at most maxUserBuckets.
type httpUsers struct {
	rate     userBuckets
	mu       sync.Mutex
	inflight map[string]int // under mu: uid -> requests in hand, > 0
}

// enter admits a request of uid, or says why not (rate_limited); a request
// admitted calls leave when it is done.
func (h *httpUsers) enter(uid string, rate float64, burst int) *protocol.Error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inflight[uid] >= maxHTTPInflight {
		return protocol.Errorf(protocol.CodeRateLimited, "%d requests of yours are in hand already, the most at once; wait for their answers (a send: retry with the same cmid)", maxHTTPInflight)
	}
	if !h.rate.take(uid, rate, burst) {
		return protocol.Errorf(protocol.CodeRateLimited, "more than %.0f requests a second (bursts of %d) from one user; slow down and retry (a send with the same cmid)", rate, burst)
	}
	if h.inflight == nil {
		h.inflight = map[string]int{}
	}
	h.inflight[uid]++
	return nil
}

func (h *httpUsers) leave(uid string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inflight[uid]--; h.inflight[uid] <= 0 {
		delete(h.inflight, uid)
	}
}

// charge charges uid's rate n requests more, for an answer that cost as
// much (extraFrames).
func (h *httpUsers) charge(uid string, n int, rate float64, burst int) {
	h.rate.charge(uid, n, rate, burst)
}
