package main

import (
	"io"
	"testing"
)

// CHAT_ALLOWED_ORIGINS patterns of an app's or an extension's origin
// (capacitor://localhost, ionic://localhost, tauri://localhost,
// chrome-extension://ID) match those pages' Origin at the gateway
// (gateway.TestAnAppSchemeOriginPatternMatches): chatd takes them, and
// refuses only ws:// and wss://, which no page's Origin has.
func TestAnAllowedOriginOfAnAppOrExtensionSchemeIsTaken(t *testing.T) {
	for _, o := range []string{"capacitor://localhost", "ionic://localhost", "tauri://localhost", "chrome-extension://abcdefghijklmnop"} {
		if _, err := parseSettings("gateway", nil, func(k string) string {
			return map[string]string{"CHAT_KAFKA_BROKERS": "kafka:9092", "CHAT_ALLOWED_ORIGINS": o}[k]
		}, io.Discard); err != nil {
			t.Errorf("CHAT_ALLOWED_ORIGINS=%s: %v; want it taken", o, err)
		}
	}
}

// A variable of a newer release, set for every role before each is
// upgraded, is warned of, not refused (README). chatd's own names lie
// three edits apart (CHAT_KAFKA_CA_FILE, CHAT_KAFKA_CERT_FILE and
// CHAT_KAFKA_KEY_FILE came in two releases), so a typo is only a name
// within two edits of a known one; names such as these, three from one,
// are warned of.
func TestANewerReleasesVariableNextToAKnownOneIsOnlyWarnedOf(t *testing.T) {
	for _, name := range []string{"CHAT_TLS_CA_FILE", "CHAT_REDIS_DB"} {
		warnings, err := checkVarNames([]string{name + "=x"})
		if err != nil || len(warnings) != 1 {
			t.Errorf("%s: %v, warnings %q; want a warning, not a refusal", name, err, warnings)
		}
	}
}
