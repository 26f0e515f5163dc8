package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/coder/websocket"
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

// DefaultMaxTokenTTL is Config.MaxTokenTTL's default: the longest life a
// token may have left when it is shown.
const DefaultMaxTokenTTL = 30 * 24 * time.Hour

// tokenSkew is how far the issuer's clock may run ahead of the gateway's:
// a token issued for exactly the cap is taken.
const tokenSkew = time.Minute

// verify checks a token and returns the user it names. A token whose exp
// is further than maxTTL from now is refused: a stolen token of a far
// exp would otherwise be good for ever, whatever the deployment rotates.
//
// A token is at most protocol.MaxTokenLen bytes wherever it comes from:
// the auth frame's decoder holds it there, and a URL or header (64 KiB)
// would otherwise have the gateway decode and check one sixteen times the
// size on every connection and request.
func verify(secret []byte, token string, maxTTL time.Duration) (string, *protocol.Error) {
	if len(token) > protocol.MaxTokenLen {
		return "", protocol.TokenTooLong(len(token))
	}
	// Base64 decoders skip line breaks, strict ones too: a token is one
	// form only, so whitespace anywhere is refused.
	if strings.ContainsAny(token, " \t\r\n") {
		return "", protocol.Errorf(protocol.CodeBadToken, "the token holds whitespace; send it as it was issued")
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) { return secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithStrictDecoding())
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", protocol.Errorf(protocol.CodeTokenExpired, "the token expired; get a new one and reconnect")
	case err != nil && !strings.Contains(token, "."):
		// A JWT is three parts joined by dots. What has none is no client
		// token at all, often the admin token given in its place.
		return "", protocol.Errorf(protocol.CodeBadToken, "the token is not valid (%v): a client token is a JWT, three parts joined by dots (the admin token is none: it is for /v1/admin/* only); "+
			"client tokens come from POST /v1/dev/token (chatd dev) or chatctl token UID, in production from your login service", err)
	case err != nil:
		return "", protocol.Errorf(protocol.CodeBadToken, "the token is not valid (%v); get a token signed by this deployment", err)
	}
	if left := time.Until(claims.ExpiresAt.Time); left-tokenSkew > maxTTL {
		return "", protocol.Errorf(protocol.CodeBadToken, "the token is valid for %v more, past this deployment's limit of %v (CHAT_MAX_TOKEN_TTL); issue tokens with a shorter life", left.Round(time.Minute), maxTTL)
	}
	if err := schema.ValidID(claims.Subject); err != nil {
		return "", protocol.Errorf(protocol.CodeBadToken, "the token's subject is not a valid user id: %v", err)
	}
	return claims.Subject, nil
}

// authenticate takes the token of the URL (?token=) or the Authorization
// header (tok), or else a first auth frame sent within AuthTimeout. It
// returns the id of that frame too, for the answer (authed, written by
// the caller once it admits the connection, or a refusal).
func (c *conn) authenticate(tok string) (uid, id string, _ *protocol.Error) {
	if tok != "" {
		uid, perr := verify(c.g.cfg.Secret, tok, c.g.cfg.MaxTokenTTL)
		return uid, "", perr
	}
	// A read cut by a deadline closes the socket without a word, so the
	// timeout answers and closes with 4001 itself; the read then fails.
	answered := make(chan struct{})
	timer := time.AfterFunc(c.g.cfg.AuthTimeout, func() {
		defer close(answered)
		if c.g.authTimedOut != nil {
			c.g.authTimedOut()
		}
		perr := protocol.Errorf(protocol.CodeUnauthenticated, "no auth frame within %v; send {\"op\":\"auth\",\"token\":...} first", c.g.cfg.AuthTimeout)
		c.writeNow(perr.Frame(""))
		c.close(CloseUnauthenticated, string(perr.Code)+": "+perr.Message)
	})
	typ, data, err := c.readAuth() // the timer above closes it
	if !timer.Stop() {
		// An auth frame read as the time ran out: the timeout's answer
		// and close are the connection's, not the normal close of its end.
		<-answered
		return "", "", errAnswered
	}
	if errors.Is(err, errAuthTooBig) {
		perr := protocol.Errorf(protocol.CodeInvalid, "an auth frame is at most %d bytes (a token of at most %d); send {\"op\":\"auth\",\"token\":...} alone", maxAuthFrame, protocol.MaxTokenLen)
		c.writeNow(perr.Frame(""))
		c.close(websocket.StatusMessageTooBig, fmt.Sprintf("auth frame over %d bytes", maxAuthFrame))
		return "", "", errAnswered
	}
	if err != nil {
		return "", "", protocol.Errorf(protocol.CodeUnauthenticated, "the connection ended before an auth frame")
	}
	if typ != websocket.MessageText {
		return "", "", protocol.Errorf(protocol.CodeBadFrame, "frames are JSON text; the first must be auth")
	}
	req, err := protocol.Decode(data, c.g.cfg.MaxBody)
	if err != nil {
		return "", req.ID, asProtocol(err) // the id, when it could be read
	}
	if req.Op != protocol.OpAuth {
		return "", req.ID, protocol.Errorf(protocol.CodeUnauthenticated,
			"the first frame must be auth, got %q; send {\"op\":\"auth\",\"token\":...} first, or connect with ?token= or an Authorization header", req.Op)
	}
	uid, perr := verify(c.g.cfg.Secret, req.Token, c.g.cfg.MaxTokenTTL)
	return uid, req.ID, perr
}

// maxAuthFrame bounds the frame a connection sends before it has
// authenticated: an auth frame with a token of protocol.MaxTokenLen bytes,
// the longest one Decode takes, and an id of protocol.MaxIDLen bytes of
// which JSON may escape each to six, with room for the field names. Anyone
// may open a connection, and up to MaxAuthenticating of them wait for
// their auth frame: each may hold this much of one, not a frame of the
// full limit (Config.maxFrame, about 100 KiB).
const maxAuthFrame = protocol.MaxTokenLen + 1024

var errAuthTooBig = errors.New("gateway: the auth frame is over its limit")

// readAuth reads the auth frame, refusing one past maxAuthFrame as soon as
// so much of it has come (errAuthTooBig). The bound is the gateway's own,
// not the WebSocket's read limit (which stays the frame limit): past that
// the WebSocket closes the connection itself, with a reason that says
// nothing of authenticating ("read limited at N bytes").
func (c *conn) readAuth() (websocket.MessageType, []byte, error) {
	typ, r, err := c.ws.Reader(context.Background())
	if err != nil {
		return 0, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(r, maxAuthFrame+1))
	if err == nil && len(data) > maxAuthFrame {
		err = errAuthTooBig
	}
	return typ, data, err
}
