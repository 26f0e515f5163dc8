package gateway

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzAwaitFrame feeds a connection's reader arbitrary client bytes. It
// must take exactly the whole, masked pings and pongs at the front, answer
// each ping with a pong carrying its unmasked payload, and stop at the first
// frame that is anything else (the WebSocket reads and judges that one), or
// at the end of the bytes.
func FuzzAwaitFrame(f *testing.F) {
	f.Add([]byte{})
	f.Add(clientFrame(0x89, []byte("hello")))
	f.Add(append(clientFrame(0x8a, nil), frame([]byte(`{"op":"sync"}`))...))
	f.Add(append(clientFrame(0x89, bytes.Repeat([]byte("p"), 125)), clientFrame(0x89, bytes.Repeat([]byte("q"), 126))...))
	f.Add([]byte{0x89, 0x05, 'h', 'e', 'l', 'l', 'o'}) // unmasked
	f.Add([]byte{0x89, 0x85, 1, 2})                    // cut short
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &conn{
			g:     &Gateway{cfg: Config{SendRate: 1e9, SendBurst: 1 << 20}},
			br:    bufio.NewReaderSize(bytes.NewReader(data), readBuffer),
			queue: outQueue{limit: 1 << 20, writing: true}, // no writer: items stay queued
		}
		err := c.awaitFrame()

		// What the front of data holds: whole, masked pings and pongs.
		rest, pongs := data, [][]byte(nil)
		for len(rest) >= 2 && (rest[0] == finPing || rest[0] == finPong) && rest[1]&0x80 != 0 && int(rest[1]&0x7f) <= 125 {
			n := int(rest[1] & 0x7f)
			if len(rest) < 6+n {
				break
			}
			if rest[0] == finPing {
				p := make([]byte, n)
				for i := range p {
					p[i] = rest[6+i] ^ rest[2+i%4]
				}
				pongs = append(pongs, append([]byte{finPong, byte(n)}, p...))
			}
			rest = rest[6+n:]
		}
		whole := len(rest) >= 2 && !((rest[0] == finPing || rest[0] == finPong) && rest[1]&0x80 != 0 && int(rest[1]&0x7f) <= 125)
		if whole != (err == nil) {
			t.Fatalf("awaitFrame = %v; the bytes after the control frames: %x", err, rest)
		}
		if err == nil {
			if left, _ := c.br.Peek(c.br.Buffered()); !bytes.HasPrefix(rest, left) || c.br.Buffered() == 0 {
				t.Fatalf("awaitFrame stopped at %x, want %x", left, rest)
			}
		}
		if len(c.queue.items) != len(pongs) {
			t.Fatalf("%d pongs queued for %d pings", len(c.queue.items), len(pongs))
		}
		for i, o := range c.queue.items {
			if !bytes.Equal(o.ctl, pongs[i]) {
				t.Fatalf("pong %d = %x, want %x", i, o.ctl, pongs[i])
			}
		}
	})
}
