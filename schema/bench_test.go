package schema

import (
	"strings"
	"testing"
)

func benchMessage() Message {
	return Message{
		Gid:         "g:team-42",
		Sender:      "alice@example.com",
		ClientMsgID: "c-7f3a.0001",
		SentAt:      1767225600000,
		Body:        []byte(strings.Repeat("héllo, wörld ", 20)[:200]),
	}
}

// The message body is heavy in multi-byte UTF-8; MessageASCII has a plain
// ASCII one, the common chat line.
func asciiMessage() Message {
	m := benchMessage()
	m.Body = []byte(strings.Repeat("see you at the standup ", 9)[:200])
	return m
}

func BenchmarkAppendMessage(b *testing.B) { benchAppend(b, benchMessage(), AppendMessage) }
func BenchmarkDecodeMessage(b *testing.B) {
	benchDecode(b, benchMessage(), AppendMessage, DecodeMessage)
}
func BenchmarkDecodeMessageASCII(b *testing.B) {
	benchDecode(b, asciiMessage(), AppendMessage, DecodeMessage)
}
func BenchmarkAppendAck(b *testing.B)     { benchAppend(b, goldenAck(), AppendAck) }
func BenchmarkDecodeAck(b *testing.B)     { benchDecode(b, goldenAck(), AppendAck, DecodeAck) }
func BenchmarkAppendReceipt(b *testing.B) { benchAppend(b, goldenReceipt(), AppendReceipt) }
func BenchmarkDecodeReceipt(b *testing.B) {
	benchDecode(b, goldenReceipt(), AppendReceipt, DecodeReceipt)
}
func BenchmarkAppendMember(b *testing.B) { benchAppend(b, goldenMember(), AppendMember) }
func BenchmarkDecodeMember(b *testing.B) { benchDecode(b, goldenMember(), AppendMember, DecodeMember) }

func benchAppend[E any](b *testing.B, e E, appendE func([]byte, *E) []byte) {
	buf := appendE(nil, &e)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = appendE(buf[:0], &e)
	}
}

func benchDecode[E any](b *testing.B, e E, appendE func([]byte, *E) []byte, decode func([]byte) (E, error)) {
	rec := appendE(nil, &e)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := decode(rec); err != nil {
			b.Fatal(err)
		}
	}
}
