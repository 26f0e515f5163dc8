package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/topics"
)

// config is chatbroker's settings.
type config struct {
	Listen     string // CHAT_KAFKA_LISTEN
	DataDir    string // CHAT_DATA_DIR
	Partitions int    // CHAT_PARTITIONS; 0: create no topics
	NoSync     bool   // CHAT_BROKER_NO_SYNC
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	def := func(env, fallback string) string {
		if v := getenv(env); v != "" {
			return v
		}
		return fallback
	}
	var c config
	fs := flag.NewFlagSet("chatbroker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Listen, "listen", def("CHAT_KAFKA_LISTEN", "127.0.0.1:9092"), "Kafka listener address; clients are told this address, so restart on the same one (CHAT_KAFKA_LISTEN)")
	fs.StringVar(&c.DataDir, "data-dir", def("CHAT_DATA_DIR", "./data/kafka"), "where the log is kept; a restart reloads it (CHAT_DATA_DIR)")
	parts, err := strconv.Atoi(def("CHAT_PARTITIONS", "0"))
	if err != nil {
		return c, fmt.Errorf("CHAT_PARTITIONS %q: want a whole number", getenv("CHAT_PARTITIONS"))
	}
	fs.IntVar(&c.Partitions, "partitions", parts, "create the chat.* topics with this many partitions when missing; 0: leave it to chatd (CHAT_PARTITIONS)")
	fs.BoolVar(&c.NoSync, "no-sync", def("CHAT_BROKER_NO_SYNC", "") != "", "do not fsync each produced batch: faster, but a machine crash may lose acknowledged records; a killed process loses nothing either way (CHAT_BROKER_NO_SYNC)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q; chatbroker takes flags only", fs.Arg(0))
	}
	switch {
	case c.Partitions < 0:
		return c, errors.New("partitions must be 0 (create no topics) or more")
	case c.DataDir == "":
		return c, errors.New("data-dir is required: the broker keeps its log on disk (CHAT_DATA_DIR)")
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
		if err := topics.Ensure(ctx, topics.Config{Brokers: []string{b.Addr()}, Partitions: c.Partitions}, log); err != nil {
			return err
		}
	}
	log.Info("serving Kafka", "addr", b.Addr(), "data", c.DataDir, "sync_writes", !c.NoSync)
	<-ctx.Done()
	log.Info("stopping")
	return nil
}
