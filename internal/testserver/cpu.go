package testserver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Benchmarks on a shared machine report the CPU each process spent per
// record: what a server takes from everything else is the honest cost.

// SelfCPU returns this process's CPU time (user+sys).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ChildCPU returns the CPU time (user+sys) of this process's children
// whose command name contains name, from /proc.
func ChildCPU(name string) time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || !bytes.Contains(b[:i], []byte(name)) {
			continue
		}
		fs := strings.Fields(string(b[i+2:])) // state ppid ... utime(12) stime(13)
		if len(fs) < 13 || fs[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		u, _ := strconv.ParseInt(fs[11], 10, 64)
		s, _ := strconv.ParseInt(fs[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100
}

// RedisCPU returns the user+sys CPU time the Redis server behind c has
// spent so far (INFO cpu).
func RedisCPU(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("testserver: redis INFO cpu: %w", err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// RedisInfo returns the value of key in section of the Redis server behind
// c's INFO ("" when absent): "stats", "total_net_output_bytes" gives a
// number; "commandstats", "cmdstat_zrange" a list such as "calls=3,...".
func RedisInfo(ctx context.Context, c redis.UniversalClient, section, key string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", fmt.Errorf("testserver: redis INFO %s: %w", section, err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return v, nil
		}
	}
	return "", nil
}
