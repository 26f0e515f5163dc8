package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// FuzzCommandArgs feeds chatctl's reader of a command's arguments (flags
// before and between the arguments) any arguments after "--", after a
// flag and an argument. Whatever they are, it never panics, and "--" ends
// the flags as the flag package has it: every argument after it is an
// argument, one that begins with "-" too (a uid may: "-" is an id byte),
// and none is read as a flag.
func FuzzCommandArgs(f *testing.F) {
	f.Add("alice")
	f.Add("-bob")
	f.Add("alice\x00bob")
	f.Add("alice\x00-bob")
	f.Add("--\x00-x")
	f.Add("-n\x005")
	f.Add("")
	f.Fuzz(func(t *testing.T, after string) {
		var post []string
		if after != "" {
			post = strings.Split(after, "\x00")
		}
		for _, name := range []string{"members add", "tail"} {
			c := newCommand(name, func(string) string { return "" }, io.Discard, io.Discard)
			if cmd := commands[name]; cmd.flags != nil {
				cmd.flags(c)
			}
			args := append([]string{"-partitions=4", "g1", "--"}, post...)
			rest, err := c.parse(args)
			want := append([]string{"g1"}, post...)
			if err != nil || !slices.Equal(rest, want) {
				t.Fatalf("%s %q: arguments %q, %v; want %q", name, args, rest, err, want)
			}
		}
	})
}
