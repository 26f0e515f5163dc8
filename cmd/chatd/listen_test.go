package main

import (
	"net"
	"strconv"
	"testing"
)

// An address in use is answered with another to try that is free: the
// next port was suggested as it was, which on a host of several roles
// (8080, 8081, ...) was often the next role's.
func TestABusyAddressIsAnsweredWithAFreeOne(t *testing.T) {
	// Two ports in a row taken (the kernel's, then the next if free).
	var first, second net.Listener
	for first == nil {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
		if err != nil {
			a.Close()
			continue
		}
		first, second = a, b
	}
	defer first.Close()
	defer second.Close()
	_, err := net.Listen("tcp", first.Addr().String())
	if err == nil {
		t.Fatal("listening twice on one address succeeded")
	}
	got := otherAddr(first.Addr().String(), err, "example")
	if got == second.Addr().String() || got == "example" {
		t.Fatalf("otherAddr suggested %s beside %s and %s, both in use", got, first.Addr(), second.Addr())
	}
	ln, lerr := net.Listen("tcp", got)
	if lerr != nil {
		t.Fatalf("otherAddr suggested %s, which is not free: %v", got, lerr)
	}
	ln.Close()
}
