package client

import (
	"hash/maphash"

	"github.com/groupchat/chatd/protocol"
)

// The sends remembered to hand a send written twice once: a resend the
// gateway produced twice is stored once, but the fan-out may push both
// records.

// sendSet remembers the sends (gid, sender, client_msg_id) of the newest
// messages handed to OnMessage, of all groups together, at most a number
// given (Config.DedupSends): the oldest is forgotten first. So its memory
// is bounded for the client, however many the groups: about 55 bytes a
// send (a map entry and a place in the ring), 0.5 MiB with the default
// 10,000. A second record comes soon after the first, as the gateway
// writes it on a resend: seconds, rarely minutes.
type sendSet struct {
	m     map[uint64]sendRec
	order []uint64 // the keys in the order remembered, a ring
	next  int      // the oldest key in order once it is full
}

// sendRec is the message that holds a send's key: the last one of its
// group, sender and client_msg_id that was not a second record.
type sendRec struct{ msgid, sentAt int64 }

// sendSeed keys the hashes of sends: a different one in every process, so
// that nothing outside can aim two sends at one hash.
var sendSeed = maphash.MakeSeed()

// sendHash is a send's key: a hash of its group, sender and client_msg_id.
// The client remembers hashes, not the strings: its memory of sends holds
// no pointer for the collector to follow, and two sends share a hash about
// once in 2^64 tries.
func sendHash(gid, sender, cmid string) uint64 {
	var h maphash.Hash
	h.SetSeed(sendSeed)
	h.WriteString(gid)
	h.WriteByte(0)
	h.WriteString(sender)
	h.WriteByte(0)
	h.WriteString(cmid)
	return h.Sum64()
}

// maxSentAt bounds the sent_at two records are compared by: 2^53 ms either
// side of 1970, as the server's (store.ClaimSentAt).
const maxSentAt = 1 << 53

// sameSend reports whether two records of one (gid, sender, client_msg_id),
// sent at a and b (unix ms), are one send under the server's dedup window
// win (ms): their sent_at, clamped to ±2^53 ms, are at most win apart. It
// is the server's rule, store.SameSend, which a test holds it to.
func sameSend(a, b, win int64) bool {
	d := min(max(a, -maxSentAt), maxSentAt) - min(max(b, -maxSentAt), maxSentAt)
	return -win <= d && d <= win
}

// sentBefore reports whether m is a second record of a send already handed
// to OnMessage, and remembers m's send among the most latest; win is the
// server's dedup window (ms). As the server decides (store.ClaimSends), m
// is a second record of the earlier message that holds its key (same
// group, sender and cmid) when they are one send (sameSend); otherwise m
// is a new message, the sender's cmid used again past the window, and
// takes the key over, keeping its place in the ring. The same message
// again, or an older one (delivered again after a retake), is not a second
// record.
func (s *sendSet) sentBefore(m protocol.Message, win int64, most int) bool {
	if m.Cmid == "" {
		return false
	}
	key := sendHash(m.Gid, m.Sender, m.Cmid)
	if r, ok := s.m[key]; ok {
		if r.msgid < m.MsgID && sameSend(m.SentAt, r.sentAt, win) {
			return true
		}
		if r.msgid < m.MsgID {
			s.m[key] = sendRec{m.MsgID, m.SentAt}
		}
		return false
	}
	if s.m == nil {
		s.m = make(map[uint64]sendRec)
	}
	if len(s.order) < most {
		s.order = append(s.order, key)
	} else {
		delete(s.m, s.order[s.next])
		s.order[s.next] = key
		s.next = (s.next + 1) % len(s.order)
	}
	s.m[key] = sendRec{m.MsgID, m.SentAt}
	return false
}

// secondRecord reports, without remembering m, whether m is a second
// record of a send already handed to OnMessage (see sentBefore).
func (s *sendSet) secondRecord(m protocol.Message, win int64) bool {
	if m.Cmid == "" {
		return false
	}
	r, ok := s.m[sendHash(m.Gid, m.Sender, m.Cmid)]
	return ok && r.msgid < m.MsgID && sameSend(m.SentAt, r.sentAt, win)
}

// sentBeforeLocked reports whether m is a second record of a send already
// handed to OnMessage (sendSet.sentBefore), and remembers m's send.
func (c *Client) sentBeforeLocked(m protocol.Message) bool {
	return c.sends.sentBefore(m, c.cfg.DedupWindow.Milliseconds(), c.cfg.DedupSends)
}
