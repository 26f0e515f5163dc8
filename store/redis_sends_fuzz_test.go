package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// FuzzBeginSendResult feeds the reader of beginSendScript's answer any
// reply of strings: the sender's stored membership ("" for none) and the
// stored send claim ("" for none, "pending:<attempt>", "removing", or the
// msgid of the send accepted before). A reply not of two is refused with
// ErrCorruptValue, as is a membership or a claim that does not read. A
// msgid answers the resend whatever the membership (SendDone); otherwise
// only a joined member gets a state, the one its claim names, and MsgID
// is -1.
func FuzzBeginSendResult(f *testing.F) {
	for _, c := range []struct {
		n             uint8
		member, claim string
	}{
		{2, "j:5", ""},
		{2, "j:5", "pending:3k7x"},
		{2, "j:5", "pending"},
		{2, "j:5", "removing"},
		{2, "j:5", "42"},
		{2, "l:5:9", "42"},
		{2, "", "42"},
		{2, "", ""},
		{2, "l:5:9", ""},
		{2, "j:5", "-1"},
		{2, "j:5", "4x"},
		{2, "j:5", "Removing"},
		{2, "x:1", "42"},
		{2, "j:5", "9223372036854775808"},
		{1, "j:5", ""},
		{3, "j:5", ""},
		{0, "", ""},
	} {
		f.Add(c.n, c.member, c.claim)
	}
	f.Fuzz(func(t *testing.T, n uint8, member, claim string) {
		reply := []any{member, claim, "extra"}[:min(int(n)%4, 3)]
		if n%4 == 3 {
			reply = append(reply, "more")
		}
		cmd := redis.NewCmd(context.Background())
		cmd.SetVal(reply)
		start := SendClaim{Member: Membership{State: MemberNone}, MsgID: -1}
		out, err := beginSendResult(start, cmd)
		if len(reply) != 2 {
			if !errors.Is(err, ErrCorruptValue) {
				t.Fatalf("a reply of %d: %+v, %v; want ErrCorruptValue", len(reply), out, err)
			}
			return
		}
		want := start
		if member != "" {
			m, merr := parseMembership(member)
			if merr != nil {
				if !errors.Is(err, ErrCorruptValue) {
					t.Fatalf("membership %q: %+v, %v; want ErrCorruptValue", member, out, err)
				}
				return
			}
			want.Member = m
		}
		pending := strings.HasPrefix(claim, "pending")
		msgid, isMsgID := decimal(claim)
		switch {
		case claim != "" && claim != "removing" && !pending && !isMsgID:
			if !errors.Is(err, ErrCorruptValue) {
				t.Fatalf("claim %q: %+v, %v; want ErrCorruptValue", claim, out, err)
			}
			return
		case isMsgID:
			want.State, want.MsgID = SendDone, msgid
		case want.Member.State != MemberJoined:
			// No state: nothing is claimed for one who is no member.
		case claim == "":
			want.State = SendClaimed
		case pending:
			want.State = SendPending
		default:
			want.State = SendRemoving
		}
		if err != nil || out != want {
			t.Fatalf("reply %q: %+v, %v; want %+v", reply, out, err, want)
		}
	})
}
