package store

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
)

var runIDPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// The fingerprint names the server: the same while it runs, another once
// it restarted, even from a snapshot that holds the same data.
func TestFingerprintChangesWhenRedisRestarts(t *testing.T) {
	srv := testserver.NewRedis(t)
	c := newServerClient(t, srv)
	r := newTestRedis(t, c, RedisConfig{})
	ctx := context.Background()
	first, err := r.Fingerprint(ctx)
	if err != nil || !runIDPattern.MatchString(first) {
		t.Fatalf("Fingerprint = %q, %v; want a run_id", first, err)
	}
	if again, err := r.Fingerprint(ctx); err != nil || again != first {
		t.Fatalf("Fingerprint of the same server = %q, %v; want %q", again, err, first)
	}
	if ok, err := r.AdvanceOffset(ctx, "persister", "chat.messages", 0, -1, 5); !ok || err != nil {
		t.Fatalf("AdvanceOffset = %v, %v", ok, err)
	}
	if err := c.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	down, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if fp, err := r.Fingerprint(down); err == nil {
		t.Fatalf("Fingerprint with redis-server down = %q, nil; want an error", fp)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	after, err := r.Fingerprint(ctx)
	if err != nil || !runIDPattern.MatchString(after) || after == first {
		t.Fatalf("Fingerprint after a restart = %q, %v; want a run_id other than %q", after, err, first)
	}
	// The position alone cannot tell: the snapshot holds it as it was.
	if off, err := r.Offsets(ctx, "persister", "chat.messages"); err != nil || off[0] != 5 {
		t.Fatalf("Offsets after the restart = %v, %v; want the saved 5", off, err)
	}
}

// miniredis does not say who it is: the fingerprint is empty, which turns
// the restart detector off.
func TestFingerprintOfMiniredisIsEmpty(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	if fp, err := newTestRedis(t, c, RedisConfig{}).Fingerprint(context.Background()); fp != "" || err != nil {
		t.Fatalf("Fingerprint on miniredis = %q, %v; want \"\", nil", fp, err)
	}
}

// On a cluster the fingerprint is the run_ids of the masters.
func TestFingerprintOfAClusterNamesItsMasters(t *testing.T) {
	srv := testserver.NewRedisCluster(t)
	r := newTestRedis(t, newClusterClient(t, srv), RedisConfig{})
	ctx := context.Background()
	node := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { node.Close() })
	info, err := node.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := parseRunID(info)
	if fp, err := r.Fingerprint(ctx); err != nil || fp != want || !runIDPattern.MatchString(fp) {
		t.Fatalf("Fingerprint of a one-master cluster = %q, %v; want its run_id %q", fp, err, want)
	}
}

func TestParseRunID(t *testing.T) {
	for _, tc := range []struct{ info, want string }{
		{"# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\ntcp_port:6379\r\n", "abc123"},
		{"run_id:last", "last"},
		{"# Clients\r\nconnected_clients:1\r\n", ""},
		{"", ""},
	} {
		if got := parseRunID(tc.info); got != tc.want {
			t.Errorf("parseRunID(%q) = %q, want %q", tc.info, got, tc.want)
		}
	}
}

// A consumer's save of its position, without and with the fingerprint read
// the runner makes before it: what the restart detector costs per save (at
// most one a CommitInterval per partition).
func BenchmarkRedisSavePosition(b *testing.B) {
	for _, fingerprint := range []bool{false, true} {
		name := "advance"
		if fingerprint {
			name = "fingerprint+advance"
		}
		b.Run(name, func(b *testing.B) {
			r, c := benchRedisServer(b, RedisConfig{})
			ctx := context.Background()
			cpu0 := redisCPU(b, c)
			b.ReportAllocs()
			at := int64(-1)
			for b.Loop() {
				if fingerprint {
					if fp, err := r.Fingerprint(ctx); err != nil || fp == "" {
						b.Fatal(fp, err)
					}
				}
				if ok, err := r.AdvanceOffset(ctx, "chat.persister", "chat.messages", 0, at, at+1); !ok || err != nil {
					b.Fatal(ok, err)
				}
				at++
			}
			reportRedis(b, c, cpu0, b.N, "saves")
		})
	}
}
