package consumers

import "github.com/groupchat/chatd/store"

// claim is the send that holds a (gid, sender, client_msg_id).
type claim struct{ msgid, sentAt int64 }

// maxClaims bounds the recent sends kept per partition (about 100 bytes
// each). Past it the oldest go first, and a resend of them is pushed again.
const maxClaims = 100_000

// claimSet is a partition's recent sends, decided as the persister's
// store.ClaimSends decides them: a send is a duplicate of the one that holds
// its key when they are one send (store.SameSend); otherwise it takes the
// key over. A claim is forgotten when ClaimSends's would expire
// (store.ClaimTTL).
type claimSet struct {
	m     map[string]claimEntry
	order []claimRef // in the order claimed
	head  int
}

type claimEntry struct {
	claim
	expires int64 // unix ms
}

type claimRef struct {
	key   string
	msgid int64
}

func (s *claimSet) get(key string, now int64) (claim, bool) {
	e, ok := s.m[key]
	if !ok || e.expires < now {
		return claim{}, false
	}
	return e.claim, true
}

func (s *claimSet) put(key string, c claim, now, win int64) {
	if s.m == nil {
		s.m = map[string]claimEntry{}
	}
	s.m[key] = claimEntry{claim: c, expires: now + store.ClaimTTL(c.sentAt, now, win)}
	s.order = append(s.order, claimRef{key, c.msgid})
	// Forget from the oldest while they expired or there are too many. A
	// key claimed again since has a later entry in order.
	for s.head < len(s.order) {
		ref := s.order[s.head]
		e, ok := s.m[ref.key]
		current := ok && e.msgid == ref.msgid
		if current && e.expires >= now && len(s.m) <= maxClaims {
			break
		}
		if current {
			delete(s.m, ref.key)
		}
		s.order[s.head] = claimRef{}
		s.head++
	}
	if s.head > 1024 && s.head > len(s.order)/2 {
		s.order = append(s.order[:0:0], s.order[s.head:]...)
		s.head = 0
	}
}
