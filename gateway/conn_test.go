package gateway

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFrameSentWithTheUpgrade: a client that sends its first frame in the
// same packet as the upgrade request (before the 101) is served: the bytes
// net/http read ahead are handed to the connection, not lost.
func TestFrameSentWithTheUpgrade(t *testing.T) {
	e := newEnv(t, envOpts{gateways: 1})
	e.group("g", "early")
	nc, err := net.Dial("tcp", strings.TrimPrefix(e.gws[0].srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	auth, _ := json.Marshal(map[string]string{"op": "auth", "id": "1", "token": e.token("early")})
	req := "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	if _, err := nc.Write(append([]byte(req), clientFrame(auth)...)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %v, %v", resp, err)
	}
	f := readServerFrame(t, br)
	var got map[string]any
	if err := json.Unmarshal(f, &got); err != nil || got["op"] != "authed" || got["uid"] != "early" {
		t.Fatalf("first frame %s (%v); want authed as early", f, err)
	}
}

// clientFrame is a masked final text frame (RFC 6455 5.2).
func clientFrame(payload []byte) []byte {
	f := []byte{0x81}
	switch n := len(payload); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n < 1<<16:
		f = append(f, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	mask := [4]byte{1, 2, 3, 4}
	f = append(f, mask[:]...)
	for i, b := range payload {
		f = append(f, b^mask[i%4])
	}
	return f
}

// readServerFrame reads one unmasked, unfragmented frame's payload.
func readServerFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	h := make([]byte, 2)
	if _, err := io.ReadFull(r, h); err != nil {
		t.Fatalf("frame header: %v", err)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		io.ReadFull(r, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		io.ReadFull(r, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		t.Fatalf("frame payload: %v", err)
	}
	return p
}
