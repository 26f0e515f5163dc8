package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat times; 100 on
// every architecture Go supports there.
const clockTicks = 100

// rssKiB reads VmRSS of pid from /proc.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the RSS of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "123456 kB"
			if len(f) >= 1 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// cpuTime reads the user plus system CPU time pid has used.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after its ')' are plain.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); utime is field 14, stime 15
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// cpuUse is the CPU the deployment and chatbench used over a span, in
// cores (1.0 = one core busy all along). Zero for a process not watched.
type cpuUse struct {
	Server    float64            `json:"server_cores"` // every watched process of the deployment
	Bench     float64            `json:"bench_cores"`
	ByProcess map[string]float64 `json:"by_process,omitempty"`
}

type cpuMark struct {
	at    time.Time
	procs []namedPID
	times []time.Duration // -1: unreadable
	bench time.Duration
}

func startCPU(procs []namedPID) cpuMark {
	m := cpuMark{at: time.Now(), procs: procs, times: make([]time.Duration, len(procs))}
	for i, p := range procs {
		var err error
		if m.times[i], err = cpuTime(p.PID); err != nil {
			m.times[i] = -1
		}
	}
	m.bench, _ = cpuTime(os.Getpid())
	return m
}

func (m cpuMark) stop() cpuUse {
	wall := time.Since(m.at).Seconds()
	if wall <= 0 || m.at.IsZero() {
		return cpuUse{}
	}
	u := cpuUse{ByProcess: map[string]float64{}}
	for i, p := range m.procs {
		if s, err := cpuTime(p.PID); err == nil && m.times[i] >= 0 {
			c := (s - m.times[i]).Seconds() / wall
			u.ByProcess[p.Name] = c
			u.Server += c
		}
	}
	if s, err := cpuTime(os.Getpid()); err == nil {
		u.Bench = (s - m.bench).Seconds() / wall
	}
	return u
}

// spent is the CPU time each watched process, and chatbench, used since
// the mark.
func (m cpuMark) spent() (byProcess map[string]time.Duration, bench time.Duration) {
	byProcess = make(map[string]time.Duration, len(m.procs))
	for i, p := range m.procs {
		if s, err := cpuTime(p.PID); err == nil && m.times[i] >= 0 {
			byProcess[p.Name] = s - m.times[i]
		}
	}
	if s, err := cpuTime(os.Getpid()); err == nil {
		bench = s - m.bench
	}
	return byProcess, bench
}

// waitQuiet waits until the watched processes together use less than
// cores over a second (ClickHouse merging what was just written, the
// projections catching up), for at most max. It reports whether they did.
func waitQuiet(ctx context.Context, procs []namedPID, cores float64, max time.Duration) bool {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		m := startCPU(procs)
		if !sleepCtx(ctx, time.Second) {
			return false
		}
		if m.stop().Server < cores {
			return true
		}
	}
	return false
}
