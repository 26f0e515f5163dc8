package main

import "testing"

// The profiler's address is told apart: on loopback it is private, on any
// other (or every) interface chatd warns.
func TestTheProfilerOffLoopbackIsNoticed(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:6061": true, "[::1]:6061": true, "localhost:6061": true,
		"0.0.0.0:6061": false, "[::]:6061": false, "10.1.2.3:6061": false, ":6061": false, "nonsense": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
