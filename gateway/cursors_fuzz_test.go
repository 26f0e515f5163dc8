package gateway

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// FuzzCursorsFrame feeds the decoding of a cursors frame, as a WebSocket
// frame and as the body of POST /v1/cursors, any bytes. A refusal is a
// protocol error; a frame taken is a cursors op of 1 to MaxCursors
// entries, each a valid gid up to a msgid or -1, no gid twice in a list
// (what cursors and its answer rest on), from UTF-8 JSON.
func FuzzCursorsFrame(f *testing.F) {
	for _, s := range []string{
		`{"op":"cursors","id":"1","acks":[{"gid":"g1","upto":42}],"reads":[{"gid":"g2","upto":9}]}`,
		`{"op":"cursors","acks":[{"gid":"g1","upto":42},{"gid":"g1","upto":43}]}`,
		`{"op":"cursors","acks":[{"gid":"g1"}],"reads":null}`,
		`{"op":"cursors","acks":[{"gid":"g1","upto":-2}]}`,
		`{"op":"cursors","acks":[{"gid":"","upto":1}]}`,
		`{"op":"cursors","acks":[null,{"gid":"g","upto":1}]}`,
		`{"op":"cursors","acks":[{"gid":"g","upto":1,"gid":"h"}]}`,
		`{"acks":[{"gid":"g","upto":9223372036854775807}]}`,
		`{"op":"cursors","reads":[{"GID":"g","UPTO":3}]}`,
		`{"op":"cursors","acks":{}}`,
		`{"op":"cursors"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, withFields(b, protocol.OpCursors, "")} {
			r, err := protocol.Decode(in, 100)
			if err != nil {
				checkRefusal(t, "cursors of "+string(b), err)
				continue
			}
			if r.Op != protocol.OpCursors {
				continue // another op, judged by its own fuzz tests
			}
			var m map[string]json.RawMessage
			if !utf8.Valid(in) || json.Unmarshal(in, &m) != nil || m == nil {
				t.Fatalf("took cursors from %q, not a UTF-8 JSON object", in)
			}
			if n := len(r.Acks) + len(r.Reads); n == 0 || n > protocol.MaxCursors {
				t.Fatalf("took cursors of %d entries from %q", n, in)
			}
			for _, l := range [][]protocol.Cursor{r.Acks, r.Reads} {
				seen := map[string]bool{}
				for _, c := range l {
					if schema.ValidID(c.Gid) != nil || c.Upto == nil || *c.Upto < -1 || seen[c.Gid] {
						t.Fatalf("took entry %+v from %q", c, in)
					}
					seen[c.Gid] = true
				}
			}
		}
	})
}
