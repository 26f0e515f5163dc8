// Package protocol is the client protocol of the gateways: JSON text frames
// over WebSocket (and the same JSON bodies over HTTP), their validation, and
// the stable error codes. PROTOCOL.md at the repository root shows every frame.
//
// A client frame carries an "op" and, when the client wants an answer it can
// match, an "id" that the server echoes. Server frames that answer a request
// carry the request's id; pushes ("push", "receipts") carry none.
//
// Decode never panics and rejects anything it does not understand with an
// *Error that has a stable Code and a message a person can act on. Everything
// here is safe for concurrent use.
package protocol
