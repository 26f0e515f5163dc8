package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// historyGateway is a gateway that hands each user the messages of
// history[uid] (by group, in msgid order) by pull, and nothing by push:
// a server whose history the test writes, faults and all. A dev token is
// the uid itself.
func historyGateway(t *testing.T, history map[string]map[string][]protocol.Message) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/dev/token" {
			var req struct{ Uid string }
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]string{"token": req.Uid})
			return
		}
		var uid string
		serveFrames(w, r, func(req protocol.Request) any {
			switch req.Op {
			case protocol.OpAuth:
				uid = req.Token
				return protocol.Authed{Op: protocol.OpAuthed, ID: req.ID, Uid: uid}
			case protocol.OpSync:
				s := protocol.Synced{Op: protocol.OpSynced, ID: req.ID, Groups: []protocol.GroupState{}}
				for gid, msgs := range history[uid] {
					s.Groups = append(s.Groups, protocol.GroupState{Gid: gid, Head: head(msgs), Ack: -1, Read: -1, Unread: int64(len(msgs)), UnreadExact: true})
				}
				return s
			case protocol.OpPull:
				msgs := history[uid][req.Gid]
				after := int64(-1)
				if req.After != nil {
					after = *req.After
				}
				p := protocol.Page{Op: protocol.OpPage, ID: req.ID, Gid: req.Gid, After: after, Msgs: []protocol.Message{}, Head: head(msgs)}
				for _, m := range msgs {
					if m.MsgID > after {
						p.Msgs = append(p.Msgs, m)
					}
				}
				return p
			}
			return protocol.OK{Op: protocol.OpOK, ID: req.ID}
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// serveFrames accepts a WebSocket and writes answer's reply to each
// request frame, until the client goes or answer returns nil.
func serveFrames(w http.ResponseWriter, r *http.Request, answer func(protocol.Request) any) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	for {
		_, b, err := conn.Read(r.Context())
		if err != nil {
			return
		}
		var req protocol.Request
		if err := json.Unmarshal(b, &req); err != nil {
			return
		}
		ans := answer(req)
		if ans == nil {
			return
		}
		if err := conn.Write(r.Context(), websocket.MessageText, protocol.Marshal(ans)); err != nil {
			return
		}
	}
}

func head(msgs []protocol.Message) int64 {
	if len(msgs) == 0 {
		return -1
	}
	return msgs[len(msgs)-1].MsgID
}
