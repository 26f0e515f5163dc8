package testserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// The ports FreePort picks from: below the kernel's range of ephemeral
// ports, which every outgoing connection and every listener on port 0
// takes its port from. A port picked there and let go could be taken by a
// test's client connecting anywhere before the server it was picked for
// binds it; below the range, only another picker of a port could.
const (
	lowestPort   = 10000
	ephemeralLow = 32768 // Linux's default start of the range, when /proc cannot be read
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// picked at random below the ephemeral range (see lowestPort; on a host
// whose range starts below 11000, from 10000 to 32767, which may overlap
// it). The port is released before FreePort returns, so another process
// may still take it first; servers that fail to bind should be restarted
// on new ports.
func FreePort() (int, error) {
	top := ephemeralStart()
	for range 100 {
		port := lowestPort + rand.IntN(top-lowestPort)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			if err := l.Close(); err != nil {
				return 0, fmt.Errorf("testserver: free port: %w", err)
			}
			return port, nil
		}
	}
	return 0, fmt.Errorf("testserver: free port: none of 100 ports picked from %d-%d was free", lowestPort, top-1)
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return ephemeralLow
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ephemeralLow
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= lowestPort+1000 {
		return ephemeralLow
	}
	return low
}

// freePorts returns n distinct free ports.
func freePorts(n int) ([]int, error) {
	seen := make(map[int]bool)
	var ports []int
	for len(ports) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}
