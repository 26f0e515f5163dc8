package schema

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// The golden samples. Their encodings live in testdata/<kind>.golden as
// hex dumps; a change to the encoding that would break records already on
// the topics fails TestGolden. Change a sample only together with its file.

func goldenMessage() Message {
	return Message{
		Gid:         "g:team-42",
		Sender:      "alice@example.com",
		ClientMsgID: "c-7f3a.0001",
		SentAt:      1767225600000, // 2026-01-01T00:00:00Z
		Body: []byte("Shipping the v1 schema today: ids are ASCII, bodies are UTF-8 " +
			"(héllo, 世界 👋), and every record starts with its version and kind."),
	}
}

func goldenAck() Ack {
	return Ack{Gid: "g:team-42", Uid: "bob", Upto: 1234567, At: 1767225601500}
}

func goldenReceipt() Receipt {
	return Receipt{Gid: "g:team-42", Uid: "bob", Upto: -1, At: 1767225602000}
}

func goldenMember() Member {
	return Member{Gid: "g:team-42", Uid: "bob", Op: OpLeave, Pos: 1234567, At: 1767225603000, By: "alice@example.com"}
}

// goldenMemberJoined is a leave that carries the join it ends.
func goldenMemberJoined() Member {
	m := goldenMember()
	m.HasJoined, m.Joined = true, 1200000
	return m
}

func TestGolden(t *testing.T) {
	t.Run("message", func(t *testing.T) {
		testGolden(t, "message.golden", goldenMessage(), AppendMessage, DecodeMessage, eqMessage)
	})
	t.Run("ack", func(t *testing.T) {
		testGolden(t, "ack.golden", goldenAck(), AppendAck, DecodeAck, eq[Ack])
	})
	t.Run("receipt", func(t *testing.T) {
		testGolden(t, "receipt.golden", goldenReceipt(), AppendReceipt, DecodeReceipt, eq[Receipt])
	})
	t.Run("member", func(t *testing.T) {
		testGolden(t, "member.golden", goldenMember(), AppendMember, DecodeMember, eq[Member])
	})
	t.Run("member with join", func(t *testing.T) {
		testGolden(t, "member_joined.golden", goldenMemberJoined(), AppendMember, DecodeMember, eq[Member])
	})
}

// testGolden checks both directions: the stored bytes still decode to the
// sample (old records stay readable), and the sample still encodes to the
// stored bytes (new records look like old ones).
func testGolden[T any](t *testing.T, name string, sample T,
	appendT func([]byte, *T) []byte, decode func([]byte) (T, error), equal func(a, b T) bool) {
	t.Helper()
	enc := appendT(nil, &sample)
	if *update {
		writeGolden(t, name, enc)
	}
	stored := readGolden(t, name)

	got, err := decode(stored)
	if err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	if !equal(got, sample) {
		t.Errorf("%s decodes to\n\t%+v\nwant\n\t%+v", name, got, sample)
	}
	if !bytes.Equal(enc, stored) {
		t.Errorf("sample encodes to\n%s\nbut %s holds\n%s(rerun with -update only if old records need not be read)",
			hex.Dump(enc), name, hex.Dump(stored))
	}
}

func goldenPath(name string) string { return filepath.Join("testdata", name) }

func writeGolden(t testing.TB, name string, b []byte) {
	t.Helper()
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goldenPath(name), []byte(hex.Dump(b)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readGolden returns the bytes of a golden file. A missing file fails the
// test rather than being created, so a lost file cannot pass silently.
func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	text, err := os.ReadFile(goldenPath(name))
	if err != nil {
		t.Fatalf("%v (create it with: go test ./schema -run TestGolden -update)", err)
	}
	b, err := parseHexDump(string(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

// parseHexDump reads the output of hex.Dump back into bytes. It insists on
// the exact dump, ASCII column included, so a hand edit that changes only
// one column is caught.
func parseHexDump(text string) ([]byte, error) {
	text = strings.ReplaceAll(text, "\r\n", "\n")
	var b []byte
	for i, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		hexPart, _, ok := strings.Cut(line, "|")
		fields := strings.Fields(hexPart)
		if !ok || len(fields) < 2 {
			return nil, fmt.Errorf("line %d: not a hex dump line: %q", i+1, line)
		}
		off, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil || off != uint64(len(b)) {
			return nil, fmt.Errorf("line %d: offset %q, want %08x", i+1, fields[0], len(b))
		}
		for _, f := range fields[1:] {
			v, err := strconv.ParseUint(f, 16, 8)
			if err != nil || len(f) != 2 {
				return nil, fmt.Errorf("line %d: bad byte %q", i+1, f)
			}
			b = append(b, byte(v))
		}
	}
	if hex.Dump(b) != text {
		return nil, fmt.Errorf("not the exact output of hex.Dump (edited by hand?)")
	}
	return b, nil
}
