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

func BenchmarkAppendMessage(b *testing.B) {
	m := benchMessage()
	buf := AppendMessage(nil, &m)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = AppendMessage(buf[:0], &m)
	}
}

func BenchmarkDecodeMessage(b *testing.B) {
	m := benchMessage()
	rec := AppendMessage(nil, &m)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := DecodeMessage(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAck(b *testing.B) {
	a := goldenAck()
	rec := AppendAck(nil, &a)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := DecodeAck(rec); err != nil {
			b.Fatal(err)
		}
	}
}
