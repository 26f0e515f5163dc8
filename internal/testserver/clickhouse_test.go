package testserver

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestClickHousePauseFreezes: once Pause returns, no thread of the server
// runs any more. SIGSTOP stops a process's threads some time after kill(2)
// returns (one thread takes the signal and stops the others); a test that
// calls the server right after Pause must not find it still answering.
func TestClickHousePauseFreezes(t *testing.T) {
	srv := NewClickHouse(t)
	pid := srv.PID()
	for i := range 30 {
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
		running, total := threadStates(t, pid)
		if err := srv.Resume(); err != nil {
			t.Fatal(err)
		}
		if total == 0 {
			t.Fatalf("no threads of pid %d in /proc", pid)
		}
		if running > 0 {
			t.Fatalf("round %d: %d of %d threads of the server not stopped when Pause returned", i, running, total)
		}
	}
}

// threadStates counts the threads of pid, and those not stopped.
func threadStates(t *testing.T, pid int) (running, total int) {
	t.Helper()
	stats, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		total++
		if !stoppedStat(string(b)) {
			running++
		}
	}
	return running, total
}

func stoppedStat(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'T' || stat[i+2] == 't')
}
