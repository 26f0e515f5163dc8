package consumers

import "testing"

// A claim lives as long as store.ClaimSends's: at most twice the window,
// also for a sent_at far ahead of the clock (a broken clock, a record
// written by hand). Kept longer, a resend the persister stores as a
// message of its own would be skipped here as a duplicate: never pushed,
// and left out of the next message's prev, a gap no client would notice.
func TestClaimSetForgetsAClaimSentAheadAsClaimSendsDoes(t *testing.T) {
	var s claimSet
	const win = 1000
	s.put("a", claim{msgid: 1, sentAt: 5 * win}, 0, win)
	if _, ok := s.get("a", 2*win-1); !ok {
		t.Fatal("the claim was forgotten within twice the window")
	}
	if _, ok := s.get("a", 2*win+1); ok {
		t.Fatal("the claim outlived twice the window, which ClaimSends's does not")
	}
}
