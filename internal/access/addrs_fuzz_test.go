package access

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzAddrs feeds the reader of the store address settings (environment
// variables and flags: outside bytes) any list. It never panics; what it
// takes is one host:port for each non-empty entry, each port a number from
// 1 to 65535 and none a URL, and the list it gives reads back as itself.
// A refusal names the setting.
func FuzzAddrs(f *testing.F) {
	for _, s := range []string{"redis:6379", "kafka-1:9092,kafka-2:9092", " a:1 , ,b:2,", "kafka", "[::1]", "::1", "[::1]:9092",
		"redis://x:6379", "x:0", "x:65536", "x:+80", "x:", ":1", "host]", "[a]b:1", ""} {
		f.Add(s, "9092")
		f.Add(s, "")
	}
	const setting = "CHAT_X (-x)"
	f.Fuzz(func(t *testing.T, s, defaultPort string) {
		if defaultPort != "" && defaultPort != "9092" {
			defaultPort = "9092" // the defaults the settings give
		}
		out, err := Addrs(s, setting, defaultPort, "x:1")
		if err != nil {
			if !strings.HasPrefix(err.Error(), setting+": ") {
				t.Fatalf("Addrs(%q): %v does not name the setting", s, err)
			}
			return
		}
		entries := 0
		for _, a := range strings.Split(s, ",") {
			if strings.TrimSpace(a) != "" {
				entries++
			}
		}
		if len(out) != entries {
			t.Fatalf("Addrs(%q) = %q: %d addresses of %d entries", s, out, len(out), entries)
		}
		for _, a := range out {
			_, port, err := net.SplitHostPort(a)
			n, perr := strconv.Atoi(port)
			if err != nil || perr != nil || n < 1 || n > 65535 || strings.Contains(a, "://") || strings.Contains(a, ",") {
				t.Fatalf("Addrs(%q) took %q", s, a)
			}
		}
		again, err := Addrs(strings.Join(out, ","), setting, defaultPort, "x:1")
		if err != nil || !slices.Equal(again, out) {
			t.Fatalf("Addrs(%q) = %q, which reads back as %q, %v", s, out, again, err)
		}
	})
}
