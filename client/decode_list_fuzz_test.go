package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecodeList holds the count of a list's values, taken before they
// are decoded, to encoding/json on any valid JSON: arrayLen is the length
// of the array encoding/json reads, and 0 for any other value, and
// decodeList gives what encoding/json gives, or refuses a list past its
// bound.
func FuzzDecodeList(f *testing.F) {
	for _, s := range []string{
		`[]`, ` [ ] `, `[1]`, `[1,2,3]`, `[1,2,3,4]`, `null`, `{}`, `"[1,2]"`, `7`,
		`["a","b,c","d\"e,f",[1,2],{"x":[3,4]}]`,
		`["\\",",",""]`, `[[],[[]],{}]`, `[ "a" , "b" ]`, `["a\\\",b"]`,
		"[\n1\n,\t2]", `[{"a":"]"},"["]`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte("[" + strings.Repeat(`"u",`, 99) + `"u"]`))
	const most = 3
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var raw []json.RawMessage
		isArray := json.Unmarshal(b, &raw) == nil && raw != nil
		if n := arrayLen(b); isArray && n != len(raw) || !isArray && n != 0 {
			t.Fatalf("arrayLen(%q) = %d; encoding/json reads %d values (an array: %t)", b, n, len(raw), isArray)
		}
		got, err := decodeList[json.RawMessage](b, most, "values")
		switch {
		case isArray && len(raw) > most:
			if err == nil || !strings.Contains(err.Error(), "values") {
				t.Fatalf("decodeList(%q) of %d values: %v; want a refusal naming them", b, len(raw), err)
			}
		case isArray || bytes.Equal(bytes.TrimSpace(b), []byte("null")):
			if err != nil || !reflect.DeepEqual(got, raw) {
				t.Fatalf("decodeList(%q) = %q, %v; encoding/json %q", b, got, err, raw)
			}
		default:
			if err == nil {
				t.Fatalf("decodeList(%q), not an array, gave %q", b, got)
			}
		}
		var want []string
		wantErr := json.Unmarshal(b, &want)
		strs, err := decodeList[string](b, len(raw), "strings")
		if (err == nil) != (wantErr == nil) || err == nil && !reflect.DeepEqual(strs, want) {
			t.Fatalf("decodeList[string](%q) = %q, %v; encoding/json %q, %v", b, strs, err, want, wantErr)
		}
	})
}
