package store

import (
	"strings"
	"testing"

	"github.com/groupchat/chatd/schema"
)

// FuzzKeyIDs holds the readers of ids in keys to the key builders. Any
// valid id comes back out of every key built with it, and no group key
// reads as a user's index; of any key, a gid read is the hash tag it
// begins with, and a uid read is that of the user index key it is
// exactly.
func FuzzKeyIDs(f *testing.F) {
	for _, s := range [][2]string{
		{"chat:{g1}:win", "g1"},
		{"chat:{u:alice}:groups", "alice"},
		{"chat:{u:alice}:nodes", "u:alice"},
		{"chat:{g1}:cmid:u/ack", "a:b@c.d-e_f"},
		{"chat:{}:win", strings.Repeat("i", schema.MaxIDLen)},
		{"chat:{u:}:groups", "x"},
		{"chat:{u:a}b}:groups", "a b"},
		{"chat:{u:a{b}:groups", "a{b"},
		{"chat:{g1", ""},
		{"chat:offsets:persister", "}"},
		{"other:{g1}:ack", "g1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, key, id string) {
		gid, ok := gidOfKey(key)
		if ok && (gid == "" || !strings.HasPrefix(key, "chat:{"+gid+"}") || strings.Contains(gid, "}")) {
			t.Fatalf("gidOfKey(%q) = %q, %v", key, gid, ok)
		}
		uid, ok := uidOfKey(key)
		mid, prefixed := strings.CutPrefix(key, "chat:{u:")
		mid, suffixed := strings.CutSuffix(mid, "}:groups")
		isIndex := prefixed && suffixed && mid != "" && !strings.ContainsAny(mid, "{}")
		if ok != isIndex || ok && (uid != mid || userGroupsKey(uid) != key) {
			t.Fatalf("uidOfKey(%q) = %q, %v", key, uid, ok)
		}

		if schema.ValidID(id) != nil {
			return
		}
		for _, k := range []string{windowKey(id), floorKey(id), headKey(id), ackKey(id), readKey(id), membersKey(id), memberOffsetsKey(id),
			claimKey(id, "u", "c"), joiningKey(id), leavingKey(id, "u"), leavesKey(id)} {
			if got, ok := gidOfKey(k); got != id || !ok {
				t.Fatalf("gidOfKey(%q) = %q, %v; want %q", k, got, ok, id)
			}
			if got, ok := uidOfKey(k); ok {
				t.Fatalf("group key %q read as the index of %q", k, got)
			}
		}
		if !isGroupKey(ackKey(id), "ack") || !isGroupKey(membersKey(id), "members") || isGroupKey(claimKey(id, "u", "ack"), "ack") {
			t.Fatalf("the keys of %q are not told apart", id)
		}
		if got, ok := uidOfKey(userGroupsKey(id)); got != id || !ok {
			t.Fatalf("uidOfKey(%q) = %q, %v; want %q", userGroupsKey(id), got, ok, id)
		}
		if got, ok := uidOfKey(presenceKey(id)); ok {
			t.Fatalf("presence key %q read as the index of %q", presenceKey(id), got)
		}
	})
}
