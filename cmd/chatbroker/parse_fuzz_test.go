package main

import (
	"io"
	"strings"
	"testing"
)

// FuzzParseEnv sets one of chatbroker's CHAT_* variables to any value.
// chatbroker either refuses with an error that names the variable, or
// takes the value as the variable's flag takes it, every other setting at
// its default (chatd's and chatctl's rule); and a flag given wins over the
// variable, whatever it holds.
func FuzzParseEnv(f *testing.F) {
	vars := []struct{ env, flag, def string }{
		{"CHAT_KAFKA_LISTEN", "listen", "127.0.0.1:9092"},
		{"CHAT_DATA_DIR", "data-dir", "./data/kafka"},
		{"CHAT_PARTITIONS", "partitions", "0"},
		{"CHAT_BROKER_NO_SYNC", "no-sync", "false"},
	}
	for _, c := range []struct {
		i     uint8
		value string
		given bool
	}{
		{0, "0.0.0.0:9092", false},
		{1, "/var/lib/chat/kafka", false},
		{2, "16", false},
		{2, "many", false},
		{3, "1", false},
		{3, "true", false},
		{3, "false", true},
		// Read otherwise than by the flags, once: a variable that did not
		// read was refused although its flag was given, -1 was refused
		// without the variable's name, 010 and 0x10 were read as chatd does
		// not (10 and refused, for 8 and 16), and any value of
		// CHAT_BROKER_NO_SYNC, false too, turned the syncs off.
		{2, "many", true},
		{2, "-1", false},
		{2, "010", false},
		{2, "0x10", false},
		{3, "false", false},
		{3, "0", false},
		{3, "yes", false},
	} {
		f.Add(c.i, c.value, c.given)
	}
	noVars := func(string) string { return "" }
	defaults, err := parse(nil, noVars, io.Discard)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, i uint8, value string, given bool) {
		v := vars[int(i)%len(vars)]
		var args []string
		if given {
			args = []string{"-" + v.flag + "=" + v.def}
		}
		c, err := parse(args, func(k string) string {
			if k == v.env {
				return value
			}
			return ""
		}, io.Discard)
		if given || value == "" {
			if err != nil || c != defaults {
				t.Fatalf("%s=%q with %q: %+v, %v; want the defaults %+v", v.env, value, args, c, err, defaults)
			}
			return
		}
		if err != nil {
			if !strings.Contains(err.Error(), v.env) {
				t.Fatalf("%s=%q: %q names not the variable", v.env, value, err)
			}
			return
		}
		want, err := parse([]string{"-" + v.flag + "=" + value}, noVars, io.Discard)
		if err != nil {
			t.Fatalf("%s=%q taken as %+v, which -%s refuses: %v", v.env, value, c, v.flag, err)
		}
		if c != want {
			t.Fatalf("%s=%q gave %+v; -%s %q gives %+v", v.env, value, c, v.flag, value, want)
		}
	})
}
