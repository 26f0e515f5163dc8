package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/groupchat/chatd/protocol"
)

// FuzzDecodePushed feeds the reader of pushed messages any bytes. It gives
// a gid only for a JSON object, and for a message the protocol package
// marshals it gives back the message's msgid, and its gid when that is
// UTF-8 (encoding/json writes U+FFFD for the rest).
func FuzzDecodePushed(f *testing.F) {
	f.Add([]byte(`{"gid":"g1","msgid":7,"prev":5,"sender":"alice","sent_at":1,"body":"hi"}`), "g1", int64(7), "hi")
	f.Add([]byte(`{"GID":"g1","MsgID":7}`), "g", int64(0), "")
	f.Add([]byte(`{"gid":"g1","msgid":"7"}`), "g:1@x", int64(-1), "\u2028")
	f.Add([]byte(`{"gid":"g1","msgid":7.5}`), "g", int64(1)<<62, "\xff")
	f.Add([]byte(`{"msgid":7}`), strings.Repeat("g", 128), int64(9), `"}{`)
	f.Add([]byte(`[]`), "", int64(0), "")
	f.Add([]byte(`null`), "g", int64(0), "")
	f.Add([]byte(`{"gid":"g1"`), "g", int64(0), "")
	f.Fuzz(func(t *testing.T, msg []byte, gid string, msgid int64, body string) {
		if m := decodePushed(msg); m.Gid != "" {
			var obj map[string]json.RawMessage
			if json.Unmarshal(msg, &obj) != nil || obj == nil {
				t.Fatalf("%q, not a JSON object, gave %+v", msg, m)
			}
		}
		prev := msgid - 1
		b := protocol.Marshal(protocol.Message{Gid: gid, MsgID: msgid, Prev: &prev, Sender: "s", SentAt: msgid, Cmid: "c", Body: body})
		m := decodePushed(b)
		if m.MsgID != msgid || utf8.ValidString(gid) && m.Gid != gid {
			t.Fatalf("message of gid %q, msgid %d (%s) read as %+v", gid, msgid, b, m)
		}
	})
}
