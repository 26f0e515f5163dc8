package client

// The scanner: the JSON subset the fast decoding path of decode.go reads.

import "unicode/utf8"

// scanner reads JSON from b. Its methods return false for anything outside
// the subset it handles; the caller then falls back to encoding/json.
type scanner struct {
	b []byte
	i int
}

func (d *scanner) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// end reports whether only whitespace is left.
func (d *scanner) end() bool {
	d.ws()
	return d.i == len(d.b)
}

// lit consumes c after whitespace.
func (d *scanner) lit(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// peek returns the next byte after whitespace, 0 at the end.
func (d *scanner) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// A key seen twice is refused: encoding/json merges repeated keys into
// earlier values in ways not worth copying. Each object reader keeps a
// bitmask of the keys it has seen.

// key reads the next key of an object and its colon: first is true for the
// first key, after '{'. done is true at the object's end. Keys with
// escapes are refused.
func (d *scanner) key(first bool) (key []byte, done, ok bool) {
	if first {
		if !d.lit('{') {
			return nil, false, false
		}
		if d.lit('}') {
			return nil, true, true
		}
	} else {
		if d.lit('}') {
			return nil, true, true
		}
		if !d.lit(',') {
			return nil, false, false
		}
	}
	if !d.lit('"') {
		return nil, false, false
	}
	start := d.i
	for d.i < len(d.b) && d.b[d.i] != '"' {
		if c := d.b[d.i]; c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, false, false
		}
		d.i++
	}
	if d.i == len(d.b) {
		return nil, false, false
	}
	key = d.b[start:d.i]
	d.i++
	return key, false, d.lit(':')
}

// once sets bit in *seen, false if it was set already.
func once(seen *uint32, bit uint32) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// str reads a string. Escapes other than \uXXXX surrogates are decoded;
// invalid UTF-8 and surrogate escapes are left to encoding/json (which
// replaces them with U+FFFD).
func (d *scanner) str() (string, bool) {
	return d.strLike("")
}

// strLike reads a string, returning like itself when the string equals it:
// the gid and the senders of a page repeat, and need not be copied again.
func (d *scanner) strLike(like string) (string, bool) {
	if !d.lit('"') {
		return "", false
	}
	start := d.i
	ascii := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			if string(s) == like {
				return like, true
			}
			return string(s), true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		case c >= 0x80:
			ascii = false
		}
		d.i++
	}
	return "", false
}

// escaped finishes a string that has escapes; d.i is at the first one.
func (d *scanner) escaped(start int) (string, bool) {
	out := append(make([]byte, 0, d.i-start+16), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", false
		}
		e := d.b[d.i+1]
		d.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if d.i+4 > len(d.b) {
				return "", false
			}
			var v rune
			for _, h := range d.b[d.i : d.i+4] {
				switch {
				case h >= '0' && h <= '9':
					v = v<<4 | rune(h-'0')
				case h >= 'a' && h <= 'f':
					v = v<<4 | rune(h-'a'+10)
				case h >= 'A' && h <= 'F':
					v = v<<4 | rune(h-'A'+10)
				default:
					return "", false
				}
			}
			if v >= 0xD800 && v < 0xE000 {
				return "", false
			}
			out = utf8.AppendRune(out, v)
			d.i += 4
		default:
			return "", false
		}
	}
	return "", false
}

// int reads an integer in JSON's grammar that fits an int64 (no fraction,
// no exponent: encoding/json refuses those for integer fields).
func (d *scanner) int() (int64, bool) {
	d.ws()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	n := d.i - digits
	if n == 0 || n > 1 && d.b[digits] == '0' || n > 19 {
		return 0, false
	}
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return 0, false
	}
	var u uint64
	for _, c := range d.b[digits:d.i] {
		u = u*10 + uint64(c-'0') // 19 digits fit a uint64
	}
	if d.b[start] == '-' {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

func (d *scanner) bool() (bool, bool) {
	d.ws()
	switch {
	case len(d.b)-d.i >= 4 && string(d.b[d.i:d.i+4]) == "true":
		d.i += 4
		return true, true
	case len(d.b)-d.i >= 5 && string(d.b[d.i:d.i+5]) == "false":
		d.i += 5
		return false, true
	}
	return false, false
}

func (d *scanner) strInto(p *string) bool {
	s, ok := d.str()
	*p = s
	return ok
}

func (d *scanner) intInto(p *int64) bool {
	v, ok := d.int()
	*p = v
	return ok
}
