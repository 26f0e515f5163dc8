package tlsclient

import (
	"testing"
	"time"
)

// SetRecheckEvery sets how often the configs made after look at their
// client certificate's files, until the test ends.
func SetRecheckEvery(tb testing.TB, d time.Duration) {
	old := recheckEvery
	recheckEvery = d
	tb.Cleanup(func() { recheckEvery = old })
}
