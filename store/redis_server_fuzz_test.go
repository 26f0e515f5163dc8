package store

import (
	"strings"
	"testing"
)

// FuzzParseRunID finds the run_id in any INFO reply: the value, trimmed,
// of the first line that begins with "run_id:", as splitting the reply at
// its newlines finds it; "" when no line does. A run_id in a reply as
// redis-server writes it (CRLF lines, among other fields, master_run_id
// style names before it) is found whole.
func FuzzParseRunID(f *testing.F) {
	for _, c := range [][2]string{
		{"# Server\r\nredis_version:7.2.4\r\nrun_id:6b1fd2a4c9e0a2b3f6d0c6e7a8b9c0d1e2f3a4b5\r\ntcp_port:6379\r\n", "6b1fd2a4c9e0a2b3f6d0c6e7a8b9c0d1e2f3a4b5"},
		{"run_id:abc", "abc"},
		{"master_run_id:x\r\nrun_id:y\r\n", "0"},
		{"run_id:\r\n", ""},
		{"run_id: a b \r\nrun_id:c\r\n", "a b"},
		{"\nrun_id:z", "\tz"},
		{"RUN_ID:z\n", "z:z"},
		{"", ""},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, info, id string) {
		want := ""
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(line, "run_id:"); ok {
				want = strings.TrimSpace(v)
				break
			}
		}
		if got := parseRunID(info); got != want {
			t.Fatalf("parseRunID(%q) = %q; want %q", info, got, want)
		}
		if id != strings.TrimSpace(id) || strings.ContainsAny(id, "\r\n") {
			return
		}
		reply := "# Server\r\nredis_version:7.2.4\r\nmaster_run_id:" + strings.Repeat("0", 40) + "\r\nrun_id:" + id + "\r\nrun_id_other:x\r\ntcp_port:6379\r\n"
		if got := parseRunID(reply); got != id {
			t.Fatalf("run_id %q in %q: read %q", id, reply, got)
		}
	})
}
