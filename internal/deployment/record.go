package deployment

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Record is what Kafka holds of the deployment's Redis.
type Record struct {
	// RedisID is the id the deployment's Redis carries.
	RedisID string
	// Addrs are the addresses (CHAT_REDIS_ADDRS entries) roles reached it
	// at, sorted, without repeats.
	Addrs []string
	// Embedded says the Redis is chatd dev's own, which ends with the
	// process: an empty Redis started later takes its place.
	Embedded bool
}

// Limits on a record, so that a stray value cannot make a role hold much.
const (
	maxIDLen   = 64
	maxAddrLen = 255
	maxAddrs   = 64
)

const recordVersion = "v1"

// ErrBadRecord says a value of chat.deployment does not decode.
var ErrBadRecord = errors.New("deployment: malformed record")

const embeddedMark = "embedded"

// Encode returns the record as its topic holds it:
// "v1 <id> <addr>,<addr>..." and " embedded" for chatd dev's own Redis.
func (r Record) Encode() []byte {
	b := []byte(recordVersion + " " + r.RedisID + " " + strings.Join(normalAddrs(r.Addrs), ","))
	if r.Embedded {
		b = append(b, " "+embeddedMark...)
	}
	return b
}

// DecodeRecord reads a value Encode wrote.
func DecodeRecord(b []byte) (Record, error) {
	parts := strings.Split(string(b), " ")
	embedded := len(parts) == 4 && parts[3] == embeddedMark
	if embedded {
		parts = parts[:3]
	}
	if len(parts) != 3 || parts[0] != recordVersion {
		return Record{}, fmt.Errorf("%w: want %q, id, addresses and %q or nothing", ErrBadRecord, recordVersion, embeddedMark)
	}
	if err := checkID(parts[1]); err != nil {
		return Record{}, err
	}
	addrs := strings.Split(parts[2], ",")
	if len(addrs) > maxAddrs {
		return Record{}, fmt.Errorf("%w: %d addresses, at most %d", ErrBadRecord, len(addrs), maxAddrs)
	}
	for _, a := range addrs {
		if a == "" || len(a) > maxAddrLen || strings.ContainsFunc(a, badAddrRune) {
			return Record{}, fmt.Errorf("%w: address %q", ErrBadRecord, a)
		}
	}
	r := Record{RedisID: parts[1], Addrs: normalAddrs(addrs), Embedded: embedded}
	if len(r.Addrs) != len(addrs) {
		return Record{}, fmt.Errorf("%w: addresses repeated or out of order", ErrBadRecord)
	}
	for i := range addrs {
		if addrs[i] != r.Addrs[i] {
			return Record{}, fmt.Errorf("%w: addresses repeated or out of order", ErrBadRecord)
		}
	}
	return r, nil
}

// checkID refuses an id that Encode could not write back as it is.
func checkID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("%w: id of %d bytes, want 1 to %d", ErrBadRecord, len(id), maxIDLen)
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-') {
			return fmt.Errorf("%w: id %q, want lower-case letters, digits and '-'", ErrBadRecord, id)
		}
	}
	return nil
}

func badAddrRune(c rune) bool { return c <= ' ' || c == ',' || c >= 0x7f }

// normalAddrs is addrs lower-cased, sorted, without repeats or blanks.
func normalAddrs(addrs []string) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if a = strings.ToLower(strings.TrimSpace(a)); a != "" {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// names reports whether the record names one of addrs.
func (r Record) names(addrs []string) bool {
	for _, a := range normalAddrs(addrs) {
		if slices.Contains(r.Addrs, a) {
			return true
		}
	}
	return false
}

// with returns the record naming addrs too.
func (r Record) with(addrs []string) Record {
	return Record{RedisID: r.RedisID, Addrs: normalAddrs(append(slices.Clone(r.Addrs), addrs...))}
}
