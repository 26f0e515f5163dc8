package store

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// FuzzWindowSenders plants any bytes as a window member (its 8-byte msgid,
// then the message's encoding as the window's writer makes it) and asks
// WindowSenders for its sender, on both roads of sendersScript: one range
// read (few members in the range) and one read per msgid (many). The
// script reads the sender out of the member in Lua; where the Go decoder
// of window members takes the member, the script must name the very
// sender it decodes. Where the Go decoder refuses it, the answer is
// ErrCorruptValue or a sender that is a valid id; never another error.
func FuzzWindowSenders(f *testing.F) {
	r, m := fuzzRedis(f)
	ctx := context.Background()
	for _, msg := range []schema.Message{
		{Gid: "g", Sender: "alice", ClientMsgID: "c-1", SentAt: 1767225600000, Body: []byte("hi")},
		{Gid: strings.Repeat("g", schema.MaxIDLen), Sender: strings.Repeat("s", schema.MaxIDLen), Body: []byte("x")},
		{Gid: strings.Repeat("g", 127), Sender: strings.Repeat("s", 128), Body: []byte("x")},
		{Gid: "g", Sender: strings.Repeat("s", 127), Body: []byte{}},
		{Gid: "g", Sender: "a b", Body: []byte("x")},
	} {
		b := schema.AppendMessage(nil, &msg)
		f.Add(b, uint32(50))
		f.Add(b[:len(b)-1], uint32(0))
	}
	f.Add([]byte{}, uint32(7))
	f.Add([]byte{schema.Version, byte(schema.KindMessage)}, uint32(7))
	f.Add([]byte{schema.Version, byte(schema.KindMessage), 0x81, 0x00, 'g', 1, 'u'}, uint32(7)) // a padded length
	f.Fuzz(func(t *testing.T, enc []byte, id32 uint32) {
		m.FlushAll()
		const gid = "fg"
		id := int64(id32)
		member := string(binary.BigEndian.AppendUint64(nil, uint64(id))) + string(enc)
		if _, err := m.ZAdd(windowKey(gid), float64(id), member); err != nil {
			t.Fatal(err)
		}
		// 20 valid members above it: asking for id and one past them
		// takes the script's road of one read per msgid.
		for i := int64(1); i <= 20; i++ {
			filler := windowMember(schema.Message{MsgID: id + i, Gid: gid, Sender: "f", Body: []byte("x")})
			if _, err := m.ZAdd(windowKey(gid), float64(id+i), filler); err != nil {
				t.Fatal(err)
			}
		}
		want, werr := decodeWindowMember(member)
		for _, ids := range [][]int64{{id}, {id, id + 21}} {
			got, err := r.WindowSenders(ctx, gid, ids)
			switch {
			case werr == nil && (err != nil || got[id] != want.Sender):
				t.Fatalf("member %x (sender %q) read by WindowSenders(%v) as %q, %v", member, want.Sender, ids, got[id], err)
			case err != nil && !errors.Is(err, ErrCorruptValue):
				t.Fatalf("member %x: WindowSenders(%v): %v does not wrap ErrCorruptValue", member, ids, err)
			case err == nil:
				if s, ok := got[id]; !ok || schema.ValidID(s) != nil {
					t.Fatalf("member %x: WindowSenders(%v) = %v, %v", member, ids, got, ok)
				}
			}
		}
	})
}
