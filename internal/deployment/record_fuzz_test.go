package deployment

import (
	"bytes"
	"testing"
)

// A value of chat.deployment is outside bytes: any of them decodes or is
// refused without a panic, and what decodes encodes back to itself.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(Record{RedisID: "0a1b2c", Addrs: []string{"redis:6379"}}.Encode())
	f.Add(Record{RedisID: "0a1b2c", Addrs: []string{"10.0.0.5:6379", "redis-1:6379"}}.Encode())
	f.Add(Record{RedisID: "0a1b2c", Addrs: []string{"127.0.0.1:40001"}, Embedded: true}.Encode())
	f.Add([]byte("v1 a b embedded x"))
	f.Add([]byte("v1  redis:6379"))
	f.Add([]byte("v1 ID redis:6379"))
	f.Add([]byte("v1 a b,,c"))
	f.Add([]byte("v2 a b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if got := r.Encode(); !bytes.Equal(got, b) {
			t.Fatalf("%q decoded to %+v, which encodes to %q", b, r, got)
		}
		if again, err := DecodeRecord(r.Encode()); err != nil || again.RedisID != r.RedisID || len(again.Addrs) != len(r.Addrs) || again.Embedded != r.Embedded {
			t.Fatalf("%+v round trip: %+v, %v", r, again, err)
		}
	})
}
