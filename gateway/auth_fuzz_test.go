package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

var fuzzSecret = bytes.Repeat([]byte("s"), 32)

// fuzzTTL is the token life the verifier takes in these targets.
const fuzzTTL = time.Hour

// signed signs claims with method and key, for tokens IssueToken would not
// make.
func signed(t testing.TB, method jwt.SigningMethod, key any, claims jwt.Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func issued(t testing.TB, uid string, ttl time.Duration) string {
	t.Helper()
	tok, err := IssueToken(fuzzSecret, uid, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// FuzzVerify feeds the token verifier tokens of its own issuer, of other
// keys, methods and claims, and their mutations. A token it takes names a
// valid uid, expires within the deployment's limit (and the issuer's clock
// skew), and is signed as the issuer signs: its signature part is the one
// encoding of the HMAC of the rest. A refusal is bad_token or
// token_expired.
func FuzzVerify(f *testing.F) {
	now := time.Now()
	exp := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(now.Add(d)) }
	good := issued(f, "alice", fuzzTTL)
	for _, tok := range []string{
		good,
		issued(f, "a.b:c@d-e_f", time.Minute),
		issued(f, strings.Repeat("u", schema.MaxIDLen), fuzzTTL+tokenSkew/2),
		issued(f, "bob", fuzzTTL+2*tokenSkew), // past the limit
		issued(f, "bob", -time.Minute),        // expired
		good + "x",
		good[:len(good)-1],
		strings.Replace(good, ".", "..", 1),
		signed(f, jwt.SigningMethodHS256, []byte("another secret of thirty-two bytes"), jwt.RegisteredClaims{Subject: "alice", ExpiresAt: exp(time.Minute)}),
		signed(f, jwt.SigningMethodHS512, fuzzSecret, jwt.RegisteredClaims{Subject: "alice", ExpiresAt: exp(time.Minute)}),
		signed(f, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.RegisteredClaims{Subject: "alice", ExpiresAt: exp(time.Minute)}),
		signed(f, jwt.SigningMethodHS256, fuzzSecret, jwt.RegisteredClaims{Subject: "alice"}),                            // no exp
		signed(f, jwt.SigningMethodHS256, fuzzSecret, jwt.RegisteredClaims{Subject: "a b", ExpiresAt: exp(time.Minute)}), // not an id
		signed(f, jwt.SigningMethodHS256, fuzzSecret, jwt.RegisteredClaims{Subject: "", ExpiresAt: exp(time.Minute)}),    // no subject
		signed(f, jwt.SigningMethodHS256, fuzzSecret, jwt.RegisteredClaims{Subject: "alice", ExpiresAt: exp(100 * 365 * 24 * time.Hour)}),
		signed(f, jwt.SigningMethodHS256, fuzzSecret, jwt.RegisteredClaims{Subject: "alice", ExpiresAt: exp(time.Minute), NotBefore: exp(time.Minute / 2)}),
		signed(f, jwt.SigningMethodHS256, fuzzSecret, jwt.MapClaims{"sub": "alice", "exp": "soon"}),
		signed(f, jwt.SigningMethodHS256, fuzzSecret, jwt.MapClaims{"sub": 7, "exp": float64(now.Add(time.Minute).Unix())}),
		"",
		"a.b.c",
		"eyJhbGciOiJIUzI1NiJ9.e30.",
	} {
		f.Add(tok)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		uid, perr := verify(fuzzSecret, tok, fuzzTTL)
		if perr != nil {
			checkRefusal(t, "token "+tok, perr, protocol.CodeBadToken, protocol.CodeTokenExpired)
			return
		}
		if err := schema.ValidID(uid); err != nil {
			t.Fatalf("took %q naming %q: %v", tok, uid, err)
		}
		var claims jwt.RegisteredClaims
		if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); err != nil || claims.Subject != uid {
			t.Fatalf("took %q naming %q; its claims %+v (%v)", tok, uid, claims, err)
		}
		// The verifier read the clock before this: the time left is less.
		if claims.ExpiresAt == nil || time.Until(claims.ExpiresAt.Time) > fuzzTTL+tokenSkew {
			t.Fatalf("took %q expiring at %v, past %v from now", tok, claims.ExpiresAt, fuzzTTL+tokenSkew)
		}
		// A second's grace: the token may have expired since it was taken.
		if time.Until(claims.ExpiresAt.Time) < -time.Second {
			t.Fatalf("took %q, expired at %v", tok, claims.ExpiresAt)
		}
		i := strings.LastIndexByte(tok, '.')
		mac := hmac.New(sha256.New, fuzzSecret)
		mac.Write([]byte(tok[:i]))
		if want := base64.RawURLEncoding.EncodeToString(mac.Sum(nil)); tok[i+1:] != want {
			t.Fatalf("took %q, whose signature is %q, not %q", tok, tok[i+1:], want)
		}
	})
}

// FuzzVerifySignatureFlip changes one byte of the signature of a token
// the issuer made: the verifier never takes the token after that.
func FuzzVerifySignatureFlip(f *testing.F) {
	f.Add("alice", uint16(0), byte(1))
	f.Add("alice", uint16(41), byte(0x20))
	f.Add("bob", uint16(42), byte(0x80))
	f.Add("a b", uint16(0), byte(1))
	f.Add(strings.Repeat("u", schema.MaxIDLen), uint16(7), byte(0xff))
	f.Fuzz(func(t *testing.T, uid string, pos uint16, mask byte) {
		tok, err := IssueToken(fuzzSecret, uid, fuzzTTL)
		if err != nil {
			if !errors.Is(err, schema.ErrInvalidID) || schema.ValidID(uid) == nil {
				t.Fatalf("IssueToken(%q): %v", uid, err)
			}
			return
		}
		if got, perr := verify(fuzzSecret, tok, fuzzTTL); perr != nil || got != uid {
			t.Fatalf("the issuer's token for %q: %q, %v", uid, got, perr)
		}
		if mask == 0 {
			mask = 1
		}
		sig := strings.LastIndexByte(tok, '.') + 1
		b := []byte(tok)
		i := sig + int(pos)%(len(b)-sig)
		b[i] ^= mask
		if got, perr := verify(fuzzSecret, string(b), fuzzTTL); perr == nil {
			t.Fatalf("took %q (byte %d of %q xor %#x) as %q", b, i, tok, mask, got)
		}
	})
}

// The last character of a token's signature carries two bits no byte
// uses: a token with them changed was taken as the same signature, so
// the same token could be written several ways.
func TestATokenWithItsSignaturesSpareBitsChangedIsRefused(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	tok, err := IssueToken(fuzzSecret, "alice", fuzzTTL)
	if err != nil {
		t.Fatal(err)
	}
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	for _, flip := range []int{1, 2, 3} {
		other := tok[:len(tok)-1] + string(alphabet[last^flip])
		if uid, perr := verify(fuzzSecret, other, fuzzTTL); perr == nil {
			t.Errorf("took %q, %q with its last character's spare bits changed, as %q", other, tok, uid)
		}
	}
	// Base64 decoders skip line breaks, strict ones too.
	for _, ws := range []string{"\n", "\r", " "} {
		other := tok[:len(tok)-5] + ws + tok[len(tok)-5:]
		if uid, perr := verify(fuzzSecret, other, fuzzTTL); perr == nil {
			t.Errorf("took %q, %q with %q in its signature, as %q", other, tok, ws, uid)
		}
	}
}

// The admin token given where a client token is wanted is refused saying
// so and where client tokens come from, not only that the token has "an
// invalid number of segments".
func TestTheAdminTokenAsAClientTokenIsToldWhereClientTokensComeFrom(t *testing.T) {
	_, perr := verify(fuzzSecret, "9f2c1e0b7a6d5c4b3a2918f7e6d5c4b3a2918f7e6d5c4b3a", fuzzTTL)
	if perr == nil || perr.Code != protocol.CodeBadToken || !strings.Contains(perr.Message, "the admin token is none") ||
		!strings.Contains(perr.Message, "POST /v1/dev/token") || !strings.Contains(perr.Message, "chatctl token") {
		t.Fatalf("a token with no dots: %v, want bad_token saying the admin token is no client token and where client tokens come from", perr)
	}
	// Nor is a word said to look like the admin token: told so, "garbage"
	// was.
	if _, perr := verify(fuzzSecret, "garbage", fuzzTTL); perr == nil || perr.Code != protocol.CodeBadToken || strings.Contains(perr.Message, "looks like") {
		t.Fatalf(`the token "garbage": %v, want bad_token saying what a client token is, not that it looks like the admin token`, perr)
	}
	tok, err := IssueToken(fuzzSecret, "alice", fuzzTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, perr := verify([]byte(strings.Repeat("o", 32)), tok, fuzzTTL); perr == nil || strings.Contains(perr.Message, "admin token") {
		t.Fatalf("a JWT of another secret: %v, want bad_token without the admin token's hint", perr)
	}
}
