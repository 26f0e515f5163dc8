package store

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// storedClaim matches a claim value as the claims write it:
// "<msgid>:<sent_at>[:<prev>]".
var storedClaim = regexp.MustCompile(`^(-?[0-9]+):(-?[0-9]+)(?::(-?[0-9]+))?$`)

// claimNumber reads a number of a claim value written in the stored form
// (strconv's, within the ±2^53 the script's doubles hold exactly).
func claimNumber(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && strconv.FormatInt(n, 10) == s && n >= -maxClaimSentAt && n <= maxClaimSentAt
}

// FuzzClaimStored plants any value in the claim key of a send (a claim of
// an older release, one cut short, an operator's edit) and claims one
// message of it with ClaimSends, by its first road (SET NX GET, then the
// script for a key claimed by another message) or by the script alone
// (Redis before 7.0). Either way the answer is no error; for a value in
// the stored form, the decision and the claim left are the ones the
// claims' rule gives (see claimScript): no claim or one by the message
// itself, not a duplicate; one by an earlier message, a duplicate within
// the dedup window, else the message claims the key (prev: the earlier
// one); one by a later message, a duplicate iff the claim before it is
// older than the message.
func FuzzClaimStored(f *testing.F) {
	r, m := fuzzRedis(f)
	ctx := context.Background()
	win := r.cfg.DedupWindow.Milliseconds()
	for _, c := range []struct {
		v    string
		sent int64
	}{
		{"", 1000}, {"7:1000", 1000}, {"5:1000", 1000}, {"5:1000", 1000 + win + 1}, {"5:1000:3", 1000 + win + 1},
		{"9:1000:3", 1000}, {"9:1000:8", 1000}, {"9:1000", 1000}, {"7:5", 1000}, {"07:1000", 1000}, {"+7:1000", 1000},
		{"5:abc", 1000}, {"5:1000:", 1000}, {"5:1000-3", 1000}, {"x", 1000},
	} {
		f.Add(c.v, c.sent, false)
		f.Add(c.v, c.sent, true)
	}
	f.Fuzz(func(t *testing.T, stored string, sent int64, scriptOnly bool) {
		m.FlushAll()
		msg := schema.Message{MsgID: 7, Gid: "fg", Sender: "fu", ClientMsgID: "c", SentAt: sent, Body: []byte("x")}
		key := claimKey(msg.Gid, msg.Sender, msg.ClientMsgID)
		if stored != "" {
			if err := m.Set(key, stored); err != nil {
				t.Fatal(err)
			}
		}
		r.noSetNXGet.Store(scriptOnly)
		defer r.noSetNXGet.Store(false)
		dup, err := r.ClaimSends(ctx, nil, []schema.Message{msg})
		if err != nil {
			t.Fatalf("claim %q: %v", stored, err)
		}
		left, _ := m.Get(key)
		mine := strconv.FormatInt(msg.MsgID, 10) + ":" + strconv.FormatInt(ClaimSentAt(sent), 10)
		wantDup, wantLeft := false, stored
		if stored == "" {
			wantLeft = mine
		} else {
			p := storedClaim.FindStringSubmatch(stored)
			if p == nil {
				return // not in the stored form: any decision
			}
			cid, ok1 := claimNumber(p[1])
			csent, ok2 := claimNumber(p[2])
			cprev, hasPrev := claimNumber(p[3])
			if !ok1 || !ok2 || p[3] != "" && !hasPrev {
				return
			}
			switch {
			case cid < msg.MsgID && SameSend(ClaimSentAt(sent), csent, win):
				wantDup = true
			case cid < msg.MsgID:
				wantLeft = mine + ":" + p[1]
			case cid > msg.MsgID:
				wantDup = hasPrev && cprev < msg.MsgID
			}
		}
		if dup[0] != wantDup || left != wantLeft {
			t.Fatalf("claim %q, message %d sent at %d (script only %v): duplicate %v, claim left %q; want %v, %q",
				stored, msg.MsgID, sent, scriptOnly, dup[0], left, wantDup, wantLeft)
		}
	})
}
