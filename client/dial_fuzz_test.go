package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/groupchat/chatd/protocol"
)

// FuzzRefusal feeds the reader of refused upgrades any answer. It gives
// nothing for a switch of protocols, and otherwise either nothing or a
// protocol error with a code, no longer than the answer's body allows.
func FuzzRefusal(f *testing.F) {
	f.Add(503, []byte(`{"code":"unavailable","message":"the gateway is starting"}`))
	f.Add(503, []byte(`{"code":"overloaded","message":"too many connections authenticating"}`))
	f.Add(401, []byte(`{"code":"bad_token"}`))
	f.Add(503, []byte(`<html>503 Service Unavailable</html>`))
	f.Add(503, []byte(`{"code":"","message":"x"}`))
	f.Add(503, []byte(`{"code":7}`))
	f.Add(502, []byte(`{"code":"x","message":"\ud800\u0000"}`))
	f.Add(101, []byte(`{"code":"unavailable","message":"x"}`))
	f.Add(200, []byte{})
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		resp := &http.Response{StatusCode: status, Body: io.NopCloser(bytes.NewReader(body))}
		err := refusal(resp)
		if err == nil {
			return
		}
		var perr *protocol.Error
		if status == http.StatusSwitchingProtocols || !errors.As(err, &perr) || perr.Code == "" {
			t.Fatalf("%d %q: %v", status, body, err)
		}
		if limit := len(fmt.Sprintf("HTTP %d: : ", status)) + len(body); len(err.Error()) > limit {
			t.Fatalf("%d with %d bytes: an error of %d bytes", status, len(body), len(err.Error()))
		}
	})
}
