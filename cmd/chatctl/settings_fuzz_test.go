package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/gateway"
	"github.com/groupchat/chatd/topics"
)

// FuzzCommandEnv sets one CHAT_* variable of chatctl's shared settings
// to any value. chatctl either refuses with an error that names the
// variable, or takes the value as the variable's flag takes it, every
// other setting at its default; and a flag given wins over the variable,
// whatever it holds.
func FuzzCommandEnv(f *testing.F) {
	index := func(env string) uint8 {
		for i, st := range allSettings {
			if st.env == env {
				return uint8(i)
			}
		}
		f.Fatalf("no setting reads %s", env)
		return 0
	}
	for _, c := range []struct {
		env, value string
		flag       bool
	}{
		{"CHAT_PARTITIONS", "32", false},
		{"CHAT_PARTITIONS", "0", false},
		{"CHAT_PARTITIONS", "0x10", false},
		{"CHAT_PARTITIONS", "010", false},
		{"CHAT_PARTITIONS", "08", false},
		{"CHAT_PARTITIONS", "sixteen", false},
		{"CHAT_PARTITIONS", "sixteen", true},
		{"CHAT_REPLICATION_FACTOR", "3", false},
		{"CHAT_REPLICATION_FACTOR", "8", false},
		{"CHAT_REPLICATION_FACTOR", "-1", true},
		{"CHAT_MESSAGE_RETENTION", "30m", false},
		{"CHAT_MESSAGE_RETENTION", "-1h", false},
		{"CHAT_MESSAGE_RETENTION", "7d", false},
		{"CHAT_MESSAGE_RETENTION", "7d", true},
		{"CHAT_KAFKA_BROKERS", "kafka:9092", false},
		{"CHAT_REDIS_PASSWORD", "\x00", false},
	} {
		f.Add(index(c.env), c.value, c.flag)
	}
	f.Fuzz(func(t *testing.T, i uint8, value string, given bool) {
		st := allSettings[int(i)%len(allSettings)]
		var args []string
		if given {
			args = []string{"-" + st.flag + "=" + st.def}
		}
		c := newCommand("topics", func(k string) string {
			if k == st.env {
				return value
			}
			return ""
		}, io.Discard, io.Discard)
		_, err := c.parse(args)
		c.s.kafkaSecurity = topics.Security{} // made from the settings compared below

		want := &settings{}
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		for _, o := range allSettings {
			o.bind(want, fs, o.flag, o.def, "")
		}
		if given || value == "" {
			if err != nil || *c.s != *want {
				t.Fatalf("%s=%q with %q: %+v, %v; want the defaults %+v", st.env, value, args, *c.s, err, *want)
			}
			return
		}
		if err != nil {
			if !strings.Contains(err.Error(), st.env) {
				t.Fatalf("%s=%q: %q names not the variable", st.env, value, err)
			}
			return
		}
		if err := fs.Set(st.flag, value); err != nil {
			t.Fatalf("%s=%q taken, which -%s refuses: %v", st.env, value, st.flag, err)
		}
		if *c.s != *want {
			t.Fatalf("%s=%q gave %+v, want %+v", st.env, value, *c.s, *want)
		}
	})
}

// FuzzTokenMaxTTL feeds chatctl token's cap any -max-ttl and
// CHAT_MAX_TOKEN_TTL. The flag wins when given, else the variable, else
// the gateways' default; the value chosen is taken when it is a positive
// duration, and refused, naming where it came from, when not.
func FuzzTokenMaxTTL(f *testing.F) {
	for _, c := range [][2]string{
		{"", ""}, {"1h", ""}, {"", "720h"}, {"1h", "junk"}, {"junk", "1h"}, {"0", ""}, {"", "-1h"},
		{"", "30d"}, {"1h30m", ""}, {"", "9999999h"}, {" 1h", ""}, {"1", ""},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, flagV, env string) {
		d, err := tokenMaxTTL(flagV, env)
		v, name := flagV, "-max-ttl"
		if v == "" {
			v, name = env, "CHAT_MAX_TOKEN_TTL"
		}
		if v == "" {
			if err != nil || d != gateway.DefaultMaxTokenTTL {
				t.Fatalf("no -max-ttl, no CHAT_MAX_TOKEN_TTL: %v, %v; want the gateways' default %v", d, err, gateway.DefaultMaxTokenTTL)
			}
			return
		}
		want, perr := time.ParseDuration(v)
		if perr != nil || want <= 0 {
			if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "720h") {
				t.Fatalf("%s %q: %v, %v; want a refusal naming %s and an example", name, v, d, err, name)
			}
			return
		}
		if err != nil || d != want {
			t.Fatalf("%s %q: %v, %v; want %v", name, v, d, err, want)
		}
	})
}
