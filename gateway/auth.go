package gateway

import (
	"errors"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// IssueToken signs a token naming uid, valid for ttl.
func IssueToken(secret []byte, uid string, ttl time.Duration) (string, error) {
	if err := schema.ValidID(uid); err != nil {
		return "", err
	}
	now := time.Now()
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
		Subject:   uid,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	})
	return t.SignedString(secret)
}

// verify checks a token and returns the user it names.
func verify(secret []byte, token string) (string, *protocol.Error) {
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", protocol.Errorf(protocol.CodeTokenExpired, "the token expired; get a new one and reconnect")
	case err != nil:
		return "", protocol.Errorf(protocol.CodeBadToken, "the token is not valid (%v); get a token signed by this deployment", err)
	}
	if err := schema.ValidID(claims.Subject); err != nil {
		return "", protocol.Errorf(protocol.CodeBadToken, "the token's subject is not a valid user id: %v", err)
	}
	return claims.Subject, nil
}
