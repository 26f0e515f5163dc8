package main

import (
	"context"
	"strings"
	"testing"
)

// chatchaos -h ended as a failure ("chatchaos: flag: help requested",
// exit status 2), and a bad value was told under the whole list of flags
// as "invalid value "10" for flag -duration: parse error". -h prints the
// flags and succeeds; a bad value is told what the flag wants.
func TestHelpSucceedsAndABadValueSaysWhatTheFlagWants(t *testing.T) {
	var out strings.Builder
	ok, err := run(context.Background(), []string{"-h"}, &out, &out)
	if !ok || err != nil || !strings.Contains(out.String(), "-duration") {
		t.Errorf("chatchaos -h: %v, %v\n%s\nwant the flags and no failure", ok, err, out.String())
	}
	out.Reset()
	ok, err = run(context.Background(), []string{"-duration", "10"}, &out, &out)
	if want := `-duration "10": want a duration such as 10s, 90m or 168h`; ok || err == nil || !strings.Contains(err.Error(), want) || strings.Contains(out.String(), "-seed") {
		t.Errorf("chatchaos -duration 10: %v, %v, printed:\n%s\nwant %q and no list of flags", ok, err, out.String(), want)
	}
}
