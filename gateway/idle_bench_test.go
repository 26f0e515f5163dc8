package gateway

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// BenchmarkIdleConnection measures what an idle connection holds in the
// gateway, after it logged in and synced as a client does: live heap and
// goroutine stack per connection, after a garbage collection. The clients
// are raw sockets in this process (no goroutine, no buffer once logged
// in), so the heap figure includes their end of each socket, about 0.3 KiB.
//
// A process's RSS per idle connection is about twice the heap plus twice
// the stack: the garbage collector (GOGC=100) lets the heap grow by what is
// live, stacks included, before it collects.
func BenchmarkIdleConnection(b *testing.B) {
	const conns = 2000
	g, url, _ := benchGateway(b)
	host := strings.TrimSuffix(strings.TrimPrefix(url, "ws://"), "/v1/ws")
	tokens := make([]string, conns)
	for i := range tokens {
		tok, err := IssueToken([]byte(testSecret), fmt.Sprintf("idle%d", i), time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		tokens[i] = tok
	}
	var heap, stack float64
	for range b.N {
		before := settledMemStats()
		clients := make([]net.Conn, conns)
		for i := range clients {
			w := dialWire(b, host, tokens[i])
			w.c.Write(frame([]byte(`{"op":"sync","id":"s"}`)))
			if f := w.read(); f["op"] != protocol.OpSynced {
				b.Fatalf("sync: %v", f)
			}
			w.c.SetReadDeadline(time.Time{})
			clients[i] = w.c
		}
		waitConns(b, g, conns)
		after := settledMemStats()
		heap = float64(after.HeapAlloc-before.HeapAlloc) / conns
		stack = float64(after.StackInuse-before.StackInuse) / conns
		for _, c := range clients {
			c.Close()
		}
		deadline := time.Now().Add(30 * time.Second)
		for g.Stats().Conns > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.ReportMetric(heap, "heap-B/conn")
	b.ReportMetric(stack, "stack-B/conn")
}

// settledMemStats reads the memory statistics once what connections did
// last (a writer ending, a timer) has settled and been collected.
func settledMemStats() runtime.MemStats {
	time.Sleep(time.Second)
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}
