package client

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/groupchat/chatd/protocol"
)

// fastDecode runs the hand-written path alone: ok false means it left the
// frame to encoding/json.
func fastDecode(b []byte) (frame, bool) {
	var f frame
	d := scanner{b: b}
	ok := d.frame(&f) && d.end()
	return f, ok
}

var frameSamples = []struct {
	json string
	fast bool // the hand-written path takes it
}{
	{`{"op":"push","msgs":[{"gid":"g1","msgid":42,"prev":41,"sender":"alice","sent_at":1767225600000,"cmid":"c-1","body":"hi"}]}`, true},
	{`{"op":"push","msgs":[{"gid":"g1","msgid":0,"prev":-1,"sender":"a","sent_at":1,"body":""}]}`, true},
	{`{"op":"push","msgs":[{"gid":"g1","msgid":7,"sender":"a","sent_at":1,"body":"no prev: unknown"}]}`, true},
	{`{"op":"page","id":"12","gid":"g1","after":-1,"msgs":[],"more":false,"head":-1}`, true},
	{` { "op" : "page" , "id":"3", "gid":"g", "after":5, "msgs":[ {"gid":"g","msgid":6,"sender":"b","sent_at":2,"body":"x"} , {"gid":"g","msgid":9,"sender":"c","sent_at":3,"body":"y"} ], "more":true, "head":99 } ` + "\n", true},
	{`{"op":"accepted","id":"7","gid":"g1","cmid":"c-9","msgid":1234}`, true},
	{`{"op":"ok","id":"8"}`, true},
	{`{"op":"authed","id":"1","uid":"bob"}`, true},
	{`{"op":"error","id":"2","code":"rate_limited","message":"slow down: 50 sends/s"}`, true},
	{`{"op":"push","msgs":[{"gid":"g","msgid":1,"sender":"a","sent_at":1,"body":"quote \" backslash \\ slash \/ tab \t nl \n cr \r bs \b ff \f \u00e9\u4e16 \u0000 end"}]}`, true},
	{`{"op":"push","msgs":[{"gid":"g","msgid":1,"sender":"a","sent_at":1,"body":"héllo, 世界 👋"}]}`, true},
	{`{"op":"push","msgs":[{"gid":"g","msgid":-0,"sender":"a","sent_at":9223372036854775807,"body":"max"}]}`, true},
	// Left to encoding/json: other ops' fields, null, surrogates, invalid
	// UTF-8, duplicate keys, other spellings of a key, unknown keys.
	{`{"op":"synced","id":"4","groups":[{"gid":"g","head":3,"ack":1,"read":0,"unread":2,"unread_exact":true}]}`, false},
	{`{"op":"authed","id":"1","uid":"bob","max_body":16384}`, false}, // once a connection
	{`{"op":"receipts","gid":"g","counts":[{"msgid":3,"read":1,"audience":4}]}`, false},
	{`{"op":"counts","id":"5","gid":"g","counts":[{"msgid":3,"read":1,"audience":4}],"unknown":[1,2]}`, false},
	{`{"op":"readers","id":"6","gid":"g","msgid":3,"read":["a","b\\\"],[,"],"unread":[]}`, false},
	{`{"op":"synced","id":"4","groups":null}`, false},
	{`{"op":"push","msgs":[{"gid":"g","msgid":1,"prev":null,"sender":"a","sent_at":1,"body":"x"}]}`, false},
	{`{"op":"push","msgs":null}`, false},
	{`{"op":"push","msgs":[{"gid":"g","msgid":1,"sender":"a","sent_at":1,"body":"\ud83d\udc4b"}]}`, false},
	{`{"op":"push","msgs":[{"gid":"g","msgid":1,"sender":"a","sent_at":1,"body":"` + "\xff" + `"}]}`, false},
	{`{"op":"push","op":"page"}`, false},
	{`{"msgs":[{"gid":"a","body":"x"}],"msgs":[{"gid":"b"}]}`, false},
	{`{"OP":"push"}`, false},
	{`{"op":"push","extra":1}`, false},
	// Not JSON, or not this struct: encoding/json reports the error.
	{`{"op":"push"} trailing`, false},
	{`{"op":"page","head":1.5}`, false},
	{`{"op":"page","head":1e3}`, false},
	{`{"op":"page","head":012}`, false},
	{`{"op":"page","head":99999999999999999999}`, false},
	{`{"op":"page","more":"yes"}`, false},
	{`{"op":"pu` + "\n" + `sh"}`, false},
	{`{"op":"push",}`, false},
	{`[]`, false},
	{``, false},
}

func TestDecodeFrameMatchesEncodingJSON(t *testing.T) {
	for _, s := range frameSamples {
		b := []byte(s.json)
		_, fast := fastDecode(b)
		if fast != s.fast {
			t.Errorf("%s: hand-written path took it: %v, want %v", s.json, fast, s.fast)
		}
		sameAsEncodingJSON(t, b)
	}
}

// sameAsEncodingJSON fails t unless decodeFrame agrees with encoding/json
// on b: the same frame, or both an error; and the hand-written path never
// accepts what encoding/json refuses.
func sameAsEncodingJSON(t *testing.T, b []byte) {
	t.Helper()
	var want frame
	wantErr := json.Unmarshal(b, &want)
	if got, ok := fastDecode(b); ok {
		if wantErr != nil {
			t.Fatalf("%q: hand-written path accepted what encoding/json refuses (%v): %+v", b, wantErr, got)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nhand-written %+v\nencoding/json %+v", b, got, want)
		}
	}
	var got frame
	err := decodeFrame(b, &got)
	if (err == nil) != (wantErr == nil) || err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decodeFrame %+v, %v; encoding/json %+v, %v", b, got, err, want, wantErr)
	}
}

// FuzzDecodeFrame holds decodeFrame to encoding/json's result on any bytes
// a server (or anything posing as one) may send.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range frameSamples {
		f.Add([]byte(s.json))
	}
	f.Add(pageJSON(3, 20))
	f.Fuzz(func(t *testing.T, b []byte) {
		sameAsEncodingJSON(t, b)
	})
}

// pageJSON is a page frame of n messages with bodies of size bytes, as the
// gateway encodes it.
func pageJSON(n, size int) []byte {
	p := protocol.Page{Op: protocol.OpPage, ID: "17", Gid: "bench-g12", After: 999, More: true, Head: 5000}
	for i := range n {
		p.Msgs = append(p.Msgs, protocol.Message{Gid: "bench-g12", MsgID: int64(1000 + i), Sender: fmt.Sprintf("bench-u%d", i%50),
			SentAt: 1767225600000 + int64(i), Cmid: "c-QWERTYUIOPASDFGHJKLZXCVBNM", Body: strings.Repeat("x", size)})
	}
	return protocol.Marshal(p)
}

func pushJSON(size int) []byte {
	prev := int64(41)
	return protocol.Marshal(protocol.Push{Op: protocol.OpPush, Msgs: []protocol.Message{{Gid: "bench-g12", MsgID: 42, Prev: &prev,
		Sender: "bench-u7", SentAt: 1767225600000, Cmid: "c-QWERTYUIOPASDFGHJKLZXCVBNM", Body: strings.Repeat("x", size)}}})
}

// BenchmarkDecodeFrame decodes a push of one message and a page of 1,000
// (64-byte bodies), with decodeFrame and with encoding/json alone.
func BenchmarkDecodeFrame(b *testing.B) {
	for _, c := range []struct {
		name string
		b    []byte
		msgs int
	}{{"push", pushJSON(64), 1}, {"page1000", pageJSON(1000, 64), 1000}} {
		for _, dec := range []struct {
			name string
			fn   func([]byte, *frame) error
		}{{"fast", decodeFrame}, {"encoding-json", func(b []byte, f *frame) error { return json.Unmarshal(b, f) }}} {
			b.Run(c.name+"/"+dec.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(c.b)))
				for b.Loop() {
					var f frame
					if err := dec.fn(c.b, &f); err != nil || len(f.Msgs) != c.msgs {
						b.Fatalf("%v, %d messages", err, len(f.Msgs))
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.msgs), "ns/msg")
			})
		}
	}
}

// A frame holds at most a page of messages (protocol.MaxLimit; a push
// holds fewer). A server frame of more, however small each, is refused
// without decoding them: 8 MiB of {} would be 2.8 million messages, over
// 250 MiB held and a gigabyte allocated.
func TestAFrameOfMoreMessagesThanAPageIsRefused(t *testing.T) {
	frameOf := func(n int, el string) []byte {
		var b strings.Builder
		b.WriteString(`{"op":"push","msgs":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(el)
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	for _, el := range []string{`{}`, `{"msgid":1}`, `{"gid":"g","msgid":1,"prev":null}`} {
		var f frame
		if err := decodeFrame(frameOf(protocol.MaxLimit, el), &f); err != nil || len(f.Msgs) != protocol.MaxLimit {
			t.Fatalf("a frame of %d messages %s: %v, %d messages; want them all", protocol.MaxLimit, el, err, len(f.Msgs))
		}
		if err := decodeFrame(frameOf(protocol.MaxLimit+1, el), &f); err == nil {
			t.Fatalf("a frame of %d messages %s decoded: want it refused", protocol.MaxLimit+1, el)
		}
		huge := frameOf((8<<20)/(len(el)+1), el)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := decodeFrame(huge, &f)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; err == nil || alloc > 32<<20 {
			t.Fatalf("a frame of %d MiB of %s: %v, %d MiB allocated; want it refused, with at most 32 MiB allocated",
				len(huge)>>20, el, err, alloc>>20)
		}
	}
}

// The other lists of a server frame are bounded too: a sync answer's
// groups, a counts answer's or receipts push's counts and unknown msgids,
// a readers answer's read and unread members. Past its bound a list is
// refused without decoding it, with an error naming it: 8 MiB of {} would
// be 2.8 million groups, 150 MiB held and more allocated, and the client
// makes each a group of its own.
func TestAFrameOfListsLongerThanTheServerSendsIsRefused(t *testing.T) {
	frameOf := func(op, key string, n int, el string) []byte {
		var b strings.Builder
		fmt.Fprintf(&b, `{"op":%q,"id":"1",%q:[`, op, key)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(el)
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	for _, c := range []struct {
		op, key, el string
		max         int
		n           func(*frame) int
	}{
		{protocol.OpSynced, "groups", `{}`, maxGroups, func(f *frame) int { return len(f.Groups) }},
		{protocol.OpSynced, "groups", `{"gid":"g"}`, maxGroups, func(f *frame) int { return len(f.Groups) }},
		{protocol.OpCounts, "counts", `{}`, maxCounts, func(f *frame) int { return len(f.Counts) }},
		{protocol.OpReceipts, "counts", `{"msgid":1,"read":1,"audience":2}`, maxCounts, func(f *frame) int { return len(f.Counts) }},
		{protocol.OpCounts, "unknown", `1`, protocol.MaxMsgIDs, func(f *frame) int { return len(f.Unknown) }},
		{protocol.OpReaders, "read", `""`, maxReaders, func(f *frame) int { return len(f.Read) }},
		{protocol.OpReaders, "unread", `"u"`, maxReaders, func(f *frame) int { return len(f.Unread) }},
	} {
		var f frame
		if err := decodeFrame(frameOf(c.op, c.key, c.max, c.el), &f); err != nil || c.n(&f) != c.max {
			t.Fatalf("%s of %d %s: %v, %d decoded; want them all", c.key, c.max, c.el, err, c.n(&f))
		}
		err := decodeFrame(frameOf(c.op, c.key, c.max+1, c.el), &f)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Fatalf("%s of %d %s: %v; want it refused, naming %s", c.key, c.max+1, c.el, err, c.key)
		}
		huge := frameOf(c.op, c.key, (8<<20)/(len(c.el)+1), c.el)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err = decodeFrame(huge, &f)
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; err == nil || alloc > 32<<20 {
			t.Fatalf("%s of %d MiB of %s: %v, %d MiB allocated; want it refused, with at most 32 MiB allocated",
				c.key, len(huge)>>20, c.el, err, alloc>>20)
		}
	}
}

func TestArrayLenCountsTheValuesOfAnArray(t *testing.T) {
	for in, want := range map[string]int{
		`[]`: 0, ` [ ] `: 0, `null`: 0, `[1]`: 1, `[ {} ]`: 1, `[1,2,3]`: 3,
		`[{"a":[1,2],"b":{"c":","}},"]\",[",[[],[]]]`: 3,
		`["\\",","]`: 2,
	} {
		if got := arrayLen([]byte(in)); got != want {
			t.Errorf("arrayLen(%s) = %d, want %d", in, got, want)
		}
	}
}
