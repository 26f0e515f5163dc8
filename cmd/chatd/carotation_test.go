package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
)

// Redis's CA rotated in place: CHAT_REDIS_CA_FILE is written with the new
// CA beside the old, then redis-server's certificate is renewed by the new
// CA (CONFIG SET, as an operator's rotation does). The client a role made
// at start reconnects to it, within the 10 s in which files are looked at
// again: no restart.
func TestARotatedRedisCAIsTrustedWithoutARestart(t *testing.T) {
	r := testserver.NewCARotation(t)
	srv := testserver.NewRedisTLS(t, r.Old)
	env := map[string]string{"CHAT_REDIS_ADDRS": srv.TLSAddr, "CHAT_REDIS_CA_FILE": r.CAFile, "CHAT_JWT_SECRET": testSecret}
	s, err := parseSettings("projector", nil, func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s.redisClient([]string{srv.TLSAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}

	r.Bundle(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.Do(ctx, "CONFIG", "SET", "tls-cert-file", r.New.CertFile, "tls-key-file", r.New.KeyFile).Err(); err != nil {
		t.Fatal(err)
	}
	// The connections open stay as they were: cut them, so the client
	// dials again.
	cut := func() {
		if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		cut()
		err := rc.Ping(ctx).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server's certificate renewed by the new CA, both CAs in the CA file for 20 s: %v; want it reached", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
