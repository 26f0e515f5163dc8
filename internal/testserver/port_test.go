package testserver

import (
	"net"
	"strconv"
	"testing"
)

// A picked port lies below the ephemeral range, where no outgoing
// connection takes its port, and can be bound.
func TestFreePortIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	top := ephemeralStart()
	seen := map[int]bool{}
	for range 50 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < lowestPort || port >= top {
			t.Fatalf("FreePort gave %d, outside %d-%d", port, lowestPort, top-1)
		}
		seen[port] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("FreePort gave %d, which cannot be bound: %v", port, err)
		}
		l.Close()
	}
	if len(seen) < 45 {
		t.Fatalf("50 picks gave %d distinct ports; they should spread over the range", len(seen))
	}
}
