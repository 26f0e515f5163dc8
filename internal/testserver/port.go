package testserver

import (
	"fmt"
	"net"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// port is released before FreePort returns, so another process may take it
// first; servers that fail to bind should be restarted on new ports.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testserver: free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("testserver: free port: %w", err)
	}
	return port, nil
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
