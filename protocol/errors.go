package protocol

import "fmt"

// Code is a stable error code. Clients switch on it; the message is for people.
type Code string

// The error codes. Retryable ones say so in their message.
const (
	CodeBadFrame        Code = "bad_frame"       // not JSON, not UTF-8, wrong types, a binary frame (one too large is closed with 1009)
	CodeUnknownOp       Code = "unknown_op"      // op not in this protocol
	CodeInvalid         Code = "invalid"         // a field is missing or out of range
	CodeUnauthenticated Code = "unauthenticated" // no token yet
	CodeBadToken        Code = "bad_token"       // malformed or wrong signature
	CodeTokenExpired    Code = "token_expired"   // get a new token
	CodeNotMember       Code = "not_member"      // not a member of the group (or never was)
	CodeLeft            Code = "left_group"      // left the group: nothing after leaving
	CodeBeyondHead      Code = "beyond_head"     // ack or read past the newest message
	CodeBodyTooLarge    Code = "body_too_large"  // send body over the limit
	CodeRateLimited     Code = "rate_limited"    // slow down, then retry
	CodeForbidden       Code = "forbidden"       // admin operation without the admin token
	CodeNotFound        Code = "not_found"       // a message (who_read), a member or a group (administration) or a route not found; to a client, an unknown group is not_member
	CodeUnavailable     Code = "unavailable"     // a store or the broker is down; retry later
	CodeOverloaded      Code = "overloaded"      // the server refuses work it cannot do in time; retry after a pause
	CodeInternal        Code = "internal"        // a bug; retry later and report it
)

// Error is a protocol error: a code and a message a person can act on.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Frame renders e as an error frame answering request id.
func (e *Error) Frame(id string) []byte {
	return Marshal(ErrorFrame{Op: OpError, ID: id, Code: e.Code, Message: e.Message})
}

// HTTPStatus maps a code to the status the HTTP API answers with.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeBadFrame, CodeUnknownOp, CodeInvalid, CodeBodyTooLarge, CodeBeyondHead:
		return 400
	case CodeUnauthenticated, CodeBadToken, CodeTokenExpired:
		return 401
	case CodeNotMember, CodeLeft, CodeForbidden:
		return 403
	case CodeNotFound:
		return 404
	case CodeRateLimited:
		return 429
	case CodeUnavailable, CodeOverloaded:
		return 503
	}
	return 500
}
