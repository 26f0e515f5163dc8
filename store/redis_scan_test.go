package store

import "testing"

func TestProjectionKeysAreToldApart(t *testing.T) {
	for _, c := range []struct {
		key          string
		ack, members bool
		uid          string
	}{
		{"chat:{g1}:ack", true, false, ""},
		{"chat:{u:x}:ack", true, false, ""}, // a group whose gid starts with "u:"
		{"chat:{g1}:members", false, true, ""},
		{"chat:{u:alice}:groups", false, false, "alice"},
		{"chat:{g1}:cmid:u/ack", false, false, ""}, // a send claim whose cmid is "ack"
		{"chat:{g1}:win", false, false, ""},
		{"chat:offsets:chat.ack-projector", false, false, ""},
		{"other:{g1}:ack", false, false, ""},
	} {
		if got := isGroupKey(c.key, "ack"); got != c.ack {
			t.Errorf("isGroupKey(%q, ack) = %v", c.key, got)
		}
		if got := isGroupKey(c.key, "members"); got != c.members {
			t.Errorf("isGroupKey(%q, members) = %v", c.key, got)
		}
		if uid, ok := uidOfKey(c.key); uid != c.uid || ok != (c.uid != "") {
			t.Errorf("uidOfKey(%q) = %q, %v", c.key, uid, ok)
		}
	}
}
