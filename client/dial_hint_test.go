package client

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A wss:// server that is there and answers, but refuses the TLS
// handshake (it asks a client certificate), fails the Dial with a TLS
// alert, "remote error: tls: certificate required": a *net.OpError of Op
// "remote error", not of "dial": it is not told that nothing answered,
// nor asked whether a gateway runs there.
func TestADialRefusedByTLSIsNotToldNothingAnswered(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Dial(ctx, Config{URL: "wss://" + srv.Listener.Addr().String() + "/v1/ws", HTTPClient: srv.Client(),
		Token: func(context.Context) (string, error) { return "t", nil }})
	if err == nil || strings.Contains(err.Error(), "is a gateway running at that address") {
		t.Fatalf("Dial refused in the TLS handshake: %v; want no hint that nothing answers there", err)
	}
}
