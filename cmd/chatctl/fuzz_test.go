package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
)

// FuzzRecordJSON feeds arbitrary record values to what chatctl tail
// prints: it never panics, and every line is one JSON object that either
// names the event's kind or says why the value does not decode.
func FuzzRecordJSON(f *testing.F) {
	f.Add(schema.AppendMessage(nil, &schema.Message{Gid: "g", Sender: "u", ClientMsgID: "c", SentAt: 1, Body: []byte("hi")}))
	f.Add(schema.AppendAck(nil, &schema.Ack{Gid: "g", Uid: "u", Upto: 3, At: 4}))
	f.Add(schema.AppendReceipt(nil, &schema.Receipt{Gid: "g", Uid: "u", Upto: 3, At: 4}))
	f.Add(schema.AppendMember(nil, &schema.Member{Gid: "g", Uid: "u", Op: schema.OpJoin, Pos: -1, At: 4, By: "admin"}))
	f.Add(schema.AppendMessage(nil, &schema.Message{Gid: "g", Sender: "u", Body: []byte{0xff, 0xfe}}))
	f.Add([]byte{})
	f.Add([]byte{1, 9})
	f.Fuzz(func(t *testing.T, value []byte) {
		line := recordJSON(&kafka.Message{Topic: "chat.x", Key: []byte("g/u"), Value: value, Time: time.UnixMilli(0)})
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("not JSON: %s: %v", line, err)
		}
		_, kind := rec["kind"]
		_, bad := rec["error"]
		if kind == bad {
			t.Fatalf("a line must have a kind or an error, not both or neither: %s", line)
		}
	})
}
