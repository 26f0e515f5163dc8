package schema

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id  string
		msg string // "" when valid
	}{
		{"a", ""},
		{"Z9", ""},
		{"alice@example.com", ""},
		{"g:team-42", ""},
		{"_.:@-", ""},
		{allID, ""},
		{maxID, ""},
		{"", "length 0, want 1 to 128 bytes"},
		{longID, "length 129, want 1 to 128 bytes"},
		{"a b", `has byte ' ' at 1`},
		{"g/u", `has byte '/' at 1`},
		{"{g}", `has byte '{' at 0`},
		{"ab\x00", `has byte '\x00' at 2`},
		{"a\n", `has byte '\n' at 1`},
		{"é", `has byte 'Ã' at 0`},
		{"a,b", `has byte ',' at 1`},
		{"a'b", `has byte '\'' at 1`},
	} {
		err := ValidID(tc.id)
		if tc.msg == "" {
			if err != nil {
				t.Errorf("ValidID(%q) = %v", tc.id, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ValidID(%q) = %v, want %v saying %q", tc.id, err, ErrInvalidID, tc.msg)
		}
	}
}

func TestKeys(t *testing.T) {
	if got := string(MessageKey("g:team-42")); got != "g:team-42" {
		t.Errorf("MessageKey = %q", got)
	}
	if got := string(MemberKey("g:team-42", "bob")); got != "g:team-42/bob" {
		t.Errorf("MemberKey = %q", got)
	}
	for _, tc := range []struct{ key, gid string }{
		{"g:team-42/bob", "g:team-42"},
		{"g:team-42", "g:team-42"},
		{"g/", "g"},
		{"/u", ""},
		{"g/u/v", "g"},
		{"", ""},
	} {
		if got := string(GidOfKey([]byte(tc.key))); got != tc.gid {
			t.Errorf("GidOfKey(%q) = %q, want %q", tc.key, got, tc.gid)
		}
	}
	if got := GidOfKey(nil); len(got) != 0 {
		t.Errorf("GidOfKey(nil) = %q", got)
	}
	// Every record of a group is routed by the same bytes, whatever its topic.
	for _, gid := range []string{"g", maxID, allID} {
		if !bytes.Equal(GidOfKey(MemberKey(gid, allID)), MessageKey(gid)) ||
			!bytes.Equal(GidOfKey(MessageKey(gid)), MessageKey(gid)) {
			t.Errorf("gid %q: member and message keys route differently", gid)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{KindMessage.String(), "message"},
		{KindAck.String(), "ack"},
		{KindReceipt.String(), "receipt"},
		{KindMember.String(), "member"},
		{Kind(9).String(), "kind(9)"},
		{OpJoin.String(), "join"},
		{OpLeave.String(), "leave"},
		{MemberOp(0).String(), "op(0)"},
	} {
		if tc.got != tc.want {
			t.Errorf("String() = %q, want %q", tc.got, tc.want)
		}
	}
}
