package consumers

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/schema"
)

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

// A sent_at at the end of the int64 range is as far ahead as any: its
// claim lives twice the window, as ClaimSends's does, not the five minutes
// of a claim sent long ago (sent_at plus the window overflowed).
func TestClaimSetKeepsAClaimSentAtTheEndOfTimeTwiceTheWindow(t *testing.T) {
	var s claimSet
	const win = int64(time.Hour / time.Millisecond)
	now := time.Now().UnixMilli()
	for _, sent := range []int64{math.MaxInt64, math.MaxInt64 - win/2, 1 << 60} {
		s.put("a", claim{msgid: 1, sentAt: sent}, now, win)
		if _, ok := s.get("a", now+10*time.Minute.Milliseconds()); !ok {
			t.Errorf("sent_at %d: the claim was forgotten after 10 minutes, within twice the window", sent)
		}
		if _, ok := s.get("a", now+2*win+1); ok {
			t.Errorf("sent_at %d: the claim outlived twice the window", sent)
		}
	}
}

// The fan-out decides resends as the persister does, also for sent_at
// values no clock gives (a broken producer, a record written by hand):
// what the persister stores is pushed (unless stale), and nothing else. Sends at the two
// ends of the int64 range are far apart, not the same send (a difference
// that overflowed made them 1 ms apart); two sends beyond 2^53 ms, where
// the persister's claim script cannot tell them apart, are one send.
func TestFanoutPushesWhatThePersisterStoresForAbsurdSentAts(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 100})
	p.member(t, "g1", "alice", schema.OpJoin)
	p.member(t, "g1", "bob", schema.OpJoin)
	n1 := subscribeNode(t, p.redis, "n1")
	p.online(t, "n1", "bob")
	p.persister(t, nil)
	p.fanout(t, &Fanout{})
	p.probe(t, n1)
	say := func(cmid string, sent int64) int64 {
		return p.sendAsU1(t, "g1", sent)(cmid)
	}
	win := p.redis.DedupWindow().Milliseconds()
	var sent []int64
	sent = append(sent, say("ends", math.MaxInt64), say("ends", math.MinInt64))
	sent = append(sent, say("far", 1<<60), say("far", 1<<60+win+1))
	last := say("", time.Now().UnixMilli())
	sent = append(sent, last)
	waitFor(t, "the last message pushed and stored", 20*time.Second, func() bool {
		h, err := p.redis.Head(context.Background(), "g1")
		return n1.has("bob", "g1", last) && err == nil && h == last
	})
	h, err := history.New(history.Config{Redis: p.redis})
	if err != nil {
		t.Fatal(err)
	}
	page, err := h.Pull(context.Background(), "g1", -1, 100)
	if err != nil {
		t.Fatal(err)
	}
	var stored, pushed []int64
	for _, m := range page.Messages {
		stored = append(stored, m.MsgID)
	}
	for _, m := range n1.pushed("bob", "g1") {
		pushed = append(pushed, m.MsgID)
	}
	// The send at MinInt64 is stored, and too old to push.
	if want := slices.Delete(slices.Clone(stored), 1, 2); !slices.Equal(pushed, want) {
		t.Fatalf("sent %v; the persister stored %v, the fan-out pushed %v, want %v", sent, stored, pushed, want)
	}
	if want := []int64{sent[0], sent[1], sent[2], last}; !slices.Equal(stored, want) {
		t.Fatalf("the persister stored %v, want %v", stored, want)
	}
	// The last names the resend the fan-out did not push as its prev.
	wantPushes(t, n1, "bob", "g1", pushed, []string{noneBefore, fmt.Sprint(stored[1]), fmt.Sprint(sent[3])})
}
