package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/flags"
	"github.com/groupchat/chatd/topics"
)

// config is chatbroker's settings.
type config struct {
	Listen     string // CHAT_KAFKA_LISTEN
	DataDir    string // CHAT_DATA_DIR
	Partitions int    // CHAT_PARTITIONS; 0: create no topics
	NoSync     bool   // CHAT_BROKER_NO_SYNC
	// Retention is chat.messages' when -partitions creates it
	// (CHAT_MESSAGE_RETENTION); negative keeps everything.
	Retention time.Duration
}

// envs are chatbroker's variables: each is its flag's default, read as
// the flag reads it (CHAT_BROKER_NO_SYNC=false keeps the syncs).
var envs = []flags.Env{
	{Name: "CHAT_KAFKA_LISTEN", Flag: "listen"},
	{Name: "CHAT_DATA_DIR", Flag: "data-dir"},
	{Name: "CHAT_PARTITIONS", Flag: "partitions", Usage: "a number of partitions, 0 to create no topics"},
	{Name: "CHAT_BROKER_NO_SYNC", Flag: "no-sync", Usage: "true to skip the fsync of each batch"},
	{Name: "CHAT_MESSAGE_RETENTION", Flag: "message-retention", Usage: "a duration such as 168h, or negative (-1h) to keep everything"},
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("chatbroker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:9092", "Kafka listener address; clients are told this address, so restart on the same one (CHAT_KAFKA_LISTEN)")
	fs.StringVar(&c.DataDir, "data-dir", "./data/kafka", "where the log is kept; a restart reloads it (CHAT_DATA_DIR)")
	fs.IntVar(&c.Partitions, "partitions", 0, "create the chat.* topics with this many partitions when missing; 0: leave it to chatd (CHAT_PARTITIONS)")
	fs.DurationVar(&c.Retention, "message-retention", 7*24*time.Hour, "chat.messages' retention when -partitions creates it; negative (e.g. -1h) keeps everything, as a deployment without ClickHouse needs (CHAT_MESSAGE_RETENTION)")
	fs.BoolVar(&c.NoSync, "no-sync", false, "do not fsync each produced batch: faster, but a machine crash may lose acknowledged records; a killed process loses nothing either way (CHAT_BROKER_NO_SYNC)")
	// A variable is its flag's default, shown by -h when the flag takes it;
	// CheckEnv refuses, by name, one it does not.
	for _, e := range envs {
		if v := getenv(e.Name); v != "" {
			if f := fs.Lookup(e.Flag); f.Value.Set(v) == nil {
				f.DefValue = f.Value.String()
			}
		}
	}
	if err := flags.Parse(fs, args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q; chatbroker takes flags only", fs.Arg(0))
	}
	if err := flags.CheckEnv(fs, getenv, envs); err != nil {
		return c, err
	}
	switch {
	case c.Partitions < 0:
		return c, errors.New("partitions must be 0 (create no topics) or more (CHAT_PARTITIONS / -partitions)")
	case c.DataDir == "":
		return c, errors.New("data-dir is required: the broker keeps its log on disk (CHAT_DATA_DIR)")
	case c.Retention >= 0 && c.Retention < time.Hour:
		return c, fmt.Errorf("message-retention %v is below 1h (CHAT_MESSAGE_RETENTION): chat.messages must outlast any persister or ClickHouse outage; use e.g. 168h, or -1h to keep everything", c.Retention)
	}
	return c, nil
}

// run serves until ctx ends, then closes the broker, which flushes its log.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	c, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h: the usage is printed, as asked
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	b, err := broker.Start(broker.Config{Listen: c.Listen, DataDir: c.DataDir, SyncWrites: !c.NoSync, Log: log})
	if err != nil {
		return err
	}
	defer b.Close()
	if c.Partitions > 0 {
		if err := topics.Ensure(ctx, topics.Config{Brokers: []string{b.Addr()}, Partitions: c.Partitions, MessageRetention: c.Retention}, log); err != nil {
			return err
		}
	}
	log.Info("serving Kafka", "addr", b.Addr(), "data", c.DataDir, "sync_writes", !c.NoSync)
	<-ctx.Done()
	log.Info("stopping")
	return nil
}
