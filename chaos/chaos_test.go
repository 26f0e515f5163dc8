package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChaos is the CI-length run: two minutes of load during which every
// kind of fault happens at least once, then the verdict. A broken invariant
// fails the test with the message, the member and the fault; the servers'
// logs and the result's JSON are kept and named.
func TestChaos(t *testing.T) {
	d := 2 * time.Minute
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("CHAOS_DURATION %q: %v", s, err)
		}
	}
	dir, err := os.MkdirTemp("", "chatchaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	res, err := Run(context.Background(), Config{Dir: dir, Duration: d, Out: &logWriter{t: t, buf: &progress}})
	if err != nil {
		t.Fatalf("the run could not be made: %v (servers' logs in %s)", err, dir)
	}
	var report strings.Builder
	res.Report(&report)
	t.Log("\n" + report.String())
	if !res.OK {
		path := filepath.Join(dir, "result.json")
		res.WriteJSON(path)
		t.Fatalf("invariants broken; result in %s, servers' logs in %s", path, filepath.Join(dir, "logs"))
	}
	if res.Accepted < 100 || res.Expected < 300 {
		t.Fatalf("only %d messages accepted (%d member deliveries expected): too little load for the verdict to mean anything", res.Accepted, res.Expected)
	}
	for _, k := range []string{"kill-9", "redis-wipe", "clickhouse-stop", "client-killed-after-pull", "cut-mid-frame", "poison"} {
		if res.Faults[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	if res.Faults["kill-9"] < 6 {
		t.Errorf("%d kill -9s, want one of each of the 5 chatd roles and the broker", res.Faults["kill-9"])
	}
	os.RemoveAll(dir)
}

// logWriter passes the run's progress lines to t.Log.
type logWriter struct {
	t   *testing.T
	buf *strings.Builder
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
