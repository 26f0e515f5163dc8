package schema

import (
	"strings"
	"testing"
)

// The benchmarks of bench_test.go use a body heavy in multi-byte UTF-8;
// these add the other events and a plain ASCII body, the common chat line.

func BenchmarkDecodeMessageASCII(b *testing.B) {
	m := benchMessage()
	m.Body = []byte(strings.Repeat("see you at the standup ", 9)[:200])
	rec := AppendMessage(nil, &m)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := DecodeMessage(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendAck(b *testing.B) {
	a := goldenAck()
	buf := AppendAck(nil, &a)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendAck(buf[:0], &a)
	}
}

func BenchmarkAppendReceipt(b *testing.B) {
	r := goldenReceipt()
	buf := AppendReceipt(nil, &r)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendReceipt(buf[:0], &r)
	}
}

func BenchmarkDecodeReceipt(b *testing.B) {
	r := goldenReceipt()
	rec := AppendReceipt(nil, &r)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := DecodeReceipt(rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendMember(b *testing.B) {
	m := goldenMember()
	buf := AppendMember(nil, &m)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendMember(buf[:0], &m)
	}
}

func BenchmarkDecodeMember(b *testing.B) {
	m := goldenMember()
	rec := AppendMember(nil, &m)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := DecodeMember(rec); err != nil {
			b.Fatal(err)
		}
	}
}
