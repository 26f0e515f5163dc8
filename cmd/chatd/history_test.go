package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// A persister started without ClickHouse in a deployment that keeps its
// history there is refused even when Redis lost the record of it (a flush,
// a restart without persistence): chat.messages, made by the roles with
// ClickHouse, deletes messages after a week, and the persister would have
// trimmed nothing into ClickHouse while the log let them go. It started,
// and the messages it took never reached ClickHouse.
func TestARoleWithoutClickHouseIsRefusedWhereTheLogDeletesMessages(t *testing.T) {
	b := testserver.NewBroker(t)
	r := testserver.NewRedis(t) // empty: no record of the history mode
	if err := topics.Ensure(context.Background(), topics.Config{Brokers: []string{b.Addr()}, Partitions: 2}, nil); err != nil {
		t.Fatal(err) // as the roles with ClickHouse make it: 168h
	}
	env := map[string]string{"CHAT_HTTP_ADDR": freeAddr(t), "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": r.Addr,
		"CHAT_PARTITIONS": "2", "CHAT_LOG_LEVEL": "error"}
	done := make(chan error, 1)
	go func() {
		done <- runTo(context.Background(), []string{"persister"}, func(k string) string { return env[k] }, io.Discard)
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "CHAT_CLICKHOUSE_ADDRS") || !strings.Contains(err.Error(), "168h") {
			t.Fatalf("a persister without ClickHouse on a chat.messages of 168h: %v, want a refusal naming the retention and CHAT_CLICKHOUSE_ADDRS", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a persister without ClickHouse on a chat.messages of 168h still runs after 15 s")
	}
}

// The roles of a deployment keep the history in one ClickHouse database:
// a role given another is refused, naming both, rather than writing its
// share where the others never read it. A record of the older form (no
// database) is taken by the first role with one.
func TestARoleWithAnotherClickHouseDatabaseIsRefused(t *testing.T) {
	mr := miniredis.RunT(t)
	rds, err := store.NewRedis(redis.NewClient(&redis.Options{Addr: mr.Addr()}), store.RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	role := func(db string) *stack {
		st := &stack{s: &settings{}, redis: rds}
		if db != "" {
			st.s.ClickHouseDB, st.ch = db, new(store.ClickHouse)
		}
		return st
	}
	mr.Set("chat:history", "clickhouse") // written before the database was named
	if err := role("chat").checkHistoryMode(ctx, "persister"); err != nil {
		t.Fatalf("a persister of database chat over the older record: %v", err)
	}
	if err := role("chat").checkHistoryMode(ctx, "gateway"); err != nil {
		t.Fatalf("a gateway of the same database: %v", err)
	}
	err = role("chat2").checkHistoryMode(ctx, "persister")
	if err == nil || !strings.Contains(err.Error(), `database "chat"`) || !strings.Contains(err.Error(), "CHAT_CLICKHOUSE_DATABASE") {
		t.Fatalf("a persister of database chat2 beside roles of chat: %v, want a refusal naming both and CHAT_CLICKHOUSE_DATABASE", err)
	}
	if err := role("").checkHistoryMode(ctx, "projector"); err == nil || !strings.Contains(err.Error(), "CHAT_CLICKHOUSE_ADDRS") {
		t.Fatalf("a projector without ClickHouse: %v, want a refusal", err)
	}
}

// make run on a ./data made with ClickHouse, now without it, is refused
// and says both ways on: its chat.messages deletes after a week.
func TestDevOnADataDirMadeWithClickHouseIsRefusedWithoutIt(t *testing.T) {
	data := t.TempDir()
	env := map[string]string{"CHAT_HTTP_ADDR": freeAddr(t), "CHAT_KAFKA_LISTEN": freeAddr(t), "CHAT_DATA_DIR": data,
		"CHAT_PARTITIONS": "2", "CHAT_LOG_LEVEL": "error",
		"CHAT_CLICKHOUSE_ADDRS": testserver.SharedClickHouse(t).Addr, "CHAT_CLICKHOUSE_DATABASE": "dev_history_test"}
	runDevUntilReady(t, env)
	delete(env, "CHAT_CLICKHOUSE_ADDRS")
	err := runTo(context.Background(), []string{"dev"}, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "CHAT_CLICKHOUSE_ADDRS") || !strings.Contains(err.Error(), "remove "+data) {
		t.Fatalf("chatd dev without ClickHouse on its data dir: %v, want a refusal naming CHAT_CLICKHOUSE_ADDRS and the data dir to remove", err)
	}
}

// chatd dev on its own data dir (made without ClickHouse) with another
// CHAT_PARTITIONS was told, after the partition counts, "for chatd dev on
// a data dir made with ClickHouse: run it with that ClickHouse again, or
// start afresh: stop it and remove ./data": false, and a remedy that
// loses the data. The hint comes only where chat.messages deletes
// records.
func TestDevWithAnotherPartitionCountIsNotToldOfClickHouse(t *testing.T) {
	data := t.TempDir()
	env := map[string]string{"CHAT_HTTP_ADDR": freeAddr(t), "CHAT_KAFKA_LISTEN": freeAddr(t), "CHAT_DATA_DIR": data,
		"CHAT_PARTITIONS": "2", "CHAT_LOG_LEVEL": "error"}
	runDevUntilReady(t, env)
	env["CHAT_PARTITIONS"] = "4"
	err := runTo(context.Background(), []string{"dev"}, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "set CHAT_PARTITIONS=2 to match") || strings.Contains(err.Error(), "ClickHouse") {
		t.Fatalf("chatd dev with CHAT_PARTITIONS=4 on a data dir of 2: %v; want CHAT_PARTITIONS=2 asked for, and no word of ClickHouse", err)
	}
}

// runDevUntilReady runs chatd dev on env until it is ready, and stops it.
func runDevUntilReady(t *testing.T, env map[string]string) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"dev"}, func(k string) string { return env[k] }) }()
	waitHealthy(t, "http://"+env["CHAT_HTTP_ADDR"]+"/readyz")
	stop()
	if err := <-done; err != nil {
		t.Fatalf("chatd dev (%v): %v", env, err)
	}
}
