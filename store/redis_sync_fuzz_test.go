package store

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// FuzzSyncResult feeds the reader of syncScript's answer (and with it
// unreadResult, the reader of unreadScript's) any reply of six values:
// the head, ack, read and floor as Redis stores them (a string, "" for
// none, or a value of another type), the count, and the leave note. A
// reply that does not read is refused with ErrCorruptValue; one that
// does reads each msgid as parseMsgID does, -1 for "", the count as
// given, exact unless the floor is above the read cursor; and the answer
// written back in canonical form (integers, as the scripts write them)
// reads the same.
func FuzzSyncResult(f *testing.F) {
	f.Add("42", "40", "41", int64(1), "", "", uint8(0))
	f.Add("", "", "", int64(0), "", "", uint8(0))
	f.Add("1e+08", "-1", "5", int64(7), "9", "l:3", uint8(0))
	f.Add("x", "1", "1", int64(0), "", "", uint8(0))
	f.Add("1", "1", "1", int64(0), "1.5", "", uint8(0))
	f.Add("1", "1", "1", int64(0), "", "", uint8(1))
	f.Add("1", "1", "1", int64(0), "", "", uint8(7))
	f.Fuzz(func(t *testing.T, head, ack, read string, n int64, floor, leaving string, shape uint8) {
		reply := []any{head, ack, read, n, floor, leaving}
		switch shape % 8 {
		case 1:
			reply = reply[:5]
		case 2:
			reply = append(reply, "x")
		case 3:
			reply[0] = n // a count where a string belongs
		case 4:
			reply[3] = head // a string where the count belongs
		case 5:
			reply[4] = nil
		}
		cmd := redis.NewCmd(context.Background())
		cmd.SetVal(reply)
		got, err := syncResult(cmd)
		if err != nil {
			if !errors.Is(err, ErrCorruptValue) {
				t.Fatalf("%q: %v does not wrap ErrCorruptValue", reply, err)
			}
			return
		}
		if s := shape % 8; s >= 1 && s <= 5 {
			t.Fatalf("a malformed reply %q (shape %d) read as %+v", reply, s, got)
		}
		var ids [3]int64
		for i, s := range []string{head, ack, read} {
			ids[i] = -1
			if s != "" {
				v, perr := parseMsgID(s)
				if perr != nil {
					t.Fatalf("%q read as %+v, though %q is no msgid", reply, got, s)
				}
				ids[i] = v
			}
		}
		exact := true
		if floor != "" {
			fl, ferr := parseMsgID(floor)
			if ferr != nil {
				t.Fatalf("%q read as %+v, though the floor %q is no msgid", reply, got, floor)
			}
			exact = ids[2] >= fl
		}
		want := MemberCursors{Head: ids[0], Ack: ids[1], Read: ids[2], Unread: n, UnreadExact: exact, leaving: leaving}
		if got != want {
			t.Fatalf("%q read as %+v, want %+v", reply, got, want)
		}
		canon := func(v int64) string {
			if v == -1 {
				return ""
			}
			return strconv.FormatInt(v, 10)
		}
		fl := ""
		if floor != "" {
			fl, _ = strconv.FormatInt(func() int64 { v, _ := parseMsgID(floor); return v }(), 10), 0
		}
		again := redis.NewCmd(context.Background())
		again.SetVal([]any{canon(got.Head), canon(got.Ack), canon(got.Read), got.Unread, fl, got.leaving})
		if got2, err := syncResult(again); err != nil || got2 != got {
			t.Fatalf("%q read as %+v; written back it reads as %+v, %v", reply, got, got2, err)
		}
	})
}
