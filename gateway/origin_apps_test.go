package gateway

import (
	"net/http/httptest"
	"testing"
)

// Pages of apps and extensions connect with an Origin of their own scheme:
// a Capacitor or Ionic app on iOS sends capacitor://localhost or
// ionic://localhost, a Tauri app tauri://localhost, a Chrome extension
// chrome-extension://ID. A CHAT_ALLOWED_ORIGINS pattern naming that origin
// matches it, here as in the WebSocket library's own check.
func TestAnAppSchemeOriginPatternMatches(t *testing.T) {
	for _, o := range []string{"capacitor://localhost", "ionic://localhost", "tauri://localhost", "chrome-extension://abcdefghijklmnop"} {
		r := httptest.NewRequest("GET", "http://chat.example.com/v1/ws", nil)
		r.Header.Set("Origin", o)
		if _, ok := allowedOrigin(r, []string{o}); !ok {
			t.Errorf("Origin %s refused by the pattern %s", o, o)
		}
	}
}
