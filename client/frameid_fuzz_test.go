package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/groupchat/chatd/protocol"
)

// namedID is the id a server frame names, read by another road than the
// client's fallback: the last top-level member named "id" in any case (as
// encoding/json matches a field's name), when the frame is a JSON object
// whose every such member is a string or null; "" otherwise.
func namedID(b []byte) string {
	if !json.Valid(b) {
		return ""
	}
	d := json.NewDecoder(bytes.NewReader(b))
	if tok, _ := d.Token(); tok != json.Delim('{') {
		return ""
	}
	id := ""
	for d.More() {
		k, _ := d.Token()
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return ""
		}
		if name, _ := k.(string); !strings.EqualFold(name, "id") {
			continue
		}
		switch v[0] {
		case 'n':
		case '"':
			json.Unmarshal(v, &id)
		default:
			return ""
		}
	}
	return id
}

// answerServer is a gateway that authenticates and syncs any client, and
// answers each who_read with its template, "$ID" replaced by the
// request's id, then with a readers frame naming "sentinel".
type answerServer struct {
	srv *httptest.Server
	wg  sync.WaitGroup

	mu       sync.Mutex
	tmpl     []byte
	id, sent string // the last who_read's id, and the frame made for it
}

// answer sets the template of the next answers and forgets the last.
func (s *answerServer) answer(tmpl []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tmpl, s.id, s.sent = tmpl, "", ""
}

// made makes the template's frame for the request id.
func (s *answerServer) made(id string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.id, s.sent = id, string(bytes.ReplaceAll(s.tmpl, []byte("$ID"), []byte(id)))
	return []byte(s.sent)
}

// last returns the last who_read's id and the frame made for it.
func (s *answerServer) last() (id string, frame []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, []byte(s.sent)
}

func newAnswerServer(tb testing.TB) *answerServer {
	s := &answerServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.wg.Add(1)
		defer s.wg.Done()
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := context.Background()
		write := func(b []byte) bool { return ws.Write(ctx, websocket.MessageText, b) == nil }
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var req protocol.Request
			if json.Unmarshal(b, &req) != nil || req.ID == "" {
				continue // acks and reads
			}
			ok := true
			switch req.Op {
			case protocol.OpAuth:
				ok = write(protocol.Marshal(protocol.Authed{Op: protocol.OpAuthed, ID: req.ID, Uid: "u"}))
			case protocol.OpSync:
				ok = write(protocol.Marshal(protocol.Synced{Op: protocol.OpSynced, ID: req.ID, Groups: []protocol.GroupState{}}))
			case protocol.OpWhoRead:
				ok = write(s.made(req.ID)) &&
					write(protocol.Marshal(protocol.Readers{Op: protocol.OpReaders, ID: req.ID, Read: []string{"sentinel"}, Unread: []string{}}))
			default:
				ok = write(protocol.Errorf(protocol.CodeUnavailable, "not here").Frame(req.ID))
			}
			if !ok {
				return
			}
		}
	}))
	tb.Cleanup(func() {
		s.srv.CloseClientConnections()
		s.srv.Close()
		s.wg.Wait()
	})
	return s
}

// FuzzFrameIDFallback answers a request with any frame, "$ID" in it
// replaced by the request's id, and then with a proper answer. A frame the
// client decodes answers the request of its id; one it refuses fails the
// request whose id it names (as encoding/json reads a member "id") at once
// with ErrProtocol and the reason, and one that names none is reported to
// OnError. No frame fails another request, is dropped unreported when it
// names no request, or leaves a request to wait out its timeout, and the
// connection outlives them all.
func FuzzFrameIDFallback(f *testing.F) {
	srv := newAnswerServer(f)
	var reported atomic.Int64
	c, err := Dial(context.Background(), Config{
		URL:   "ws" + strings.TrimPrefix(srv.srv.URL, "http") + "/v1/ws",
		Token: func(context.Context) (string, error) { return "t", nil },
		OnError: func(err error) {
			if errors.Is(err, ErrProtocol) {
				reported.Add(1)
			}
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })

	for _, s := range []string{
		`{"op":"readers","id":"$ID","gid":"g","msgid":1,"read":["a"],"unread":["b"]}`,
		`{"op":"readers","id":"$ID","read":7}`,
		`{"op":"readers","ID":"$ID","read":{}}`,
		`{"op":"readers","id":"$ID","iD":null,"msgs":"x"}`,
		`{"op":"readers","id":"$ID","id":"other","read":7}`,
		`{"op":"readers","id":"other","id":"$ID","read":7}`,
		`{"op":"readers","id":"$ID","Id":5,"read":7}`,
		`{"op":"readers","id":"\u0024ID","read":7}`,
		`{"op":"readers","read":7}`,
		`{"op":"readers","id":"","read":7}`,
		`{"op":"readers","id":7,"read":[]}`,
		`{"op":"readers","id":"$ID","read":[`,
		`{"op":"error","id":"$ID","code":"forbidden","message":"no"}`,
		`{"op":"error","code":"unavailable"}`,
		`{"op":"error","code":"unavailable","read":1}`,
		`{"op":"accepted","id":"$ID","msgid":"x"}`,
		`{"op":"push","msgs":[]}`,
		`{"op":"resync","reason":"x"}`,
		`["$ID"]`,
		`null`,
		`"$ID"`,
		``,
		"{\"op\":\"readers\",\"id\":\"$ID\",\"read\":[\"\xff\"],\"unread\":[]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, tmpl []byte) {
		// A larger frame reads as one of 8 KiB does, only slower: each is a
		// round trip, and so is each step of minimizing one. Its first 8
		// KiB stand for it.
		tmpl = tmpl[:min(len(tmpl), 8<<10)]
		srv.answer(tmpl)
		before := reported.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		read, _, err := c.WhoRead(ctx, "g", 1)
		cancel()
		reports := reported.Load() - before
		id, sent := srv.last()
		if id == "" {
			t.Fatalf("answered with %q: the request never reached the server: %v", tmpl, err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("answered with %q: the request waited out its timeout", sent)
		}
		if c.Stats().Reconnects != 0 {
			t.Fatalf("answered with %q: the connection was lost", sent)
		}
		var dec frame
		decErr := decodeFrame(sent, &dec)
		if decErr == nil && (dec.Op == protocol.OpPush || dec.Op == protocol.OpResync || dec.Op == protocol.OpReceipts) {
			return // not an answer: FuzzDecodeFrame holds what those do
		}
		sentinel := err == nil && slices.Equal(read, []string{"sentinel"})
		switch named := namedID(sent); {
		case decErr == nil && dec.ID == id && dec.Op == protocol.OpError:
			var perr *protocol.Error
			if !errors.As(err, &perr) || perr.Code != dec.Code || reports != 0 {
				t.Fatalf("answered with the error %q: %v (%d reported); want the error", sent, err, reports)
			}
		case decErr == nil && dec.ID == id:
			if err != nil || !slices.Equal(read, dec.Read) || reports != 0 {
				t.Fatalf("answered with %q: %q, %v (%d reported); want %q", sent, read, err, reports, dec.Read)
			}
		case decErr == nil:
			if !sentinel || reports != 0 {
				t.Fatalf("answered with %q, for no request: %q, %v (%d reported); want the answer after it", sent, read, err, reports)
			}
		case named == id:
			if !errors.Is(err, ErrProtocol) || reports != 0 {
				t.Fatalf("answered with %q, refused: %q, %v (%d reported); want ErrProtocol", sent, read, err, reports)
			}
		case named == "":
			if !sentinel || reports != 1 {
				t.Fatalf("answered with %q, refused and naming no request: %q, %v (%d reported); want it reported once, and the answer after it", sent, read, err, reports)
			}
		default:
			if !sentinel || reports != 0 {
				t.Fatalf("answered with %q, refused, for another request (%q): %q, %v (%d reported); want the answer after it", sent, named, read, err, reports)
			}
		}
	})
}
