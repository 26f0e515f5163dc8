package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const testSecret = "0123456789abcdef0123456789abcdef"

func ctlToken(args []string, env map[string]string) (string, error) {
	var out strings.Builder
	err := run(context.Background(), append([]string{"token"}, args...), func(k string) string { return env[k] }, &out, &strings.Builder{})
	return strings.TrimSpace(out.String()), err
}

// chatctl token signs a token the gateways take: HS256, the user as its
// subject, expiring after -ttl.
func TestTokenIsSignedForTheUser(t *testing.T) {
	tok, err := ctlToken([]string{"alice", "-ttl", "2h"}, map[string]string{"CHAT_JWT_SECRET": testSecret})
	if err != nil {
		t.Fatal(err)
	}
	var claims jwt.RegisteredClaims
	if _, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return []byte(testSecret), nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired()); err != nil {
		t.Fatalf("the token %q does not verify: %v", tok, err)
	}
	if claims.Subject != "alice" {
		t.Errorf("subject %q, want alice", claims.Subject)
	}
	if left := time.Until(claims.ExpiresAt.Time); left < 119*time.Minute || left > 2*time.Hour {
		t.Errorf("the token expires in %v, want 2h", left)
	}
}

// Every mistake says what is wrong and what to do.
func TestTokenMistakesSayWhatToDo(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"alice"}, nil, "set CHAT_JWT_SECRET"},
		{[]string{"alice"}, nil, "CHAT_JWT_SECRET=$(cat data/jwt-secret)"}, // chatd dev's
		{[]string{"alice", "-jwt-secret", "short"}, nil, "under 32 bytes"},
		{[]string{"alice", "-ttl", "0s"}, map[string]string{"CHAT_JWT_SECRET": testSecret}, "-ttl 1h"},
		{[]string{"al ice"}, map[string]string{"CHAT_JWT_SECRET": testSecret}, `user id "al ice"`},
		{nil, map[string]string{"CHAT_JWT_SECRET": testSecret}, "usage: chatctl token UID"},
		// The gateways refuse a token that lives past CHAT_MAX_TOKEN_TTL
		// (30 days by default): chatctl does not make one.
		{[]string{"alice", "-ttl", "8760h"}, map[string]string{"CHAT_JWT_SECRET": testSecret}, "CHAT_MAX_TOKEN_TTL"},
		{[]string{"alice", "-ttl", "48h"}, map[string]string{"CHAT_JWT_SECRET": testSecret, "CHAT_MAX_TOKEN_TTL": "24h"}, "shorter -ttl"},
		{[]string{"alice", "-ttl", "48h", "-max-ttl", "1d"}, map[string]string{"CHAT_JWT_SECRET": testSecret}, "-max-ttl"},
	} {
		if _, err := ctlToken(tc.args, tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("chatctl token %q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
