package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// `chatctl help` and the table of docs/operations.md list the same flags
// for each command: they had drifted (reset's -partition in the docs
// only, its -topic in the help only; tail's -partition in the help only).
func TestTheHelpAndTheDocsListTheSameFlags(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The first cells of the table's rows.
	var doc string
	for _, line := range strings.Split(strings.ReplaceAll(string(raw), `\|`, "|"), "\n") {
		if strings.HasPrefix(line, "| `chatctl ") {
			cell, _, _ := strings.Cut(line[1:], " | ")
			doc += cell + "\n"
		}
	}
	flag := regexp.MustCompile(`(?:^|[\s\[])-([a-z][a-z-]*)`)
	flagsOf := func(s string) []string {
		var out []string
		for _, m := range flag.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	for name := range commands {
		var help string
		for _, line := range strings.Split(usage, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "chatctl "+name); ok && (rest == "" || rest[0] == ' ') {
				help, _, _ = strings.Cut(rest, "   ") // the synopsis, not the words after it
			}
		}
		m := regexp.MustCompile("`chatctl " + regexp.QuoteMeta(name) + "( [^`]*)?`").FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("docs/operations.md's table has no `chatctl %s ...`", name)
			continue
		}
		if got, want := flagsOf(m[1]), flagsOf(help); !slices.Equal(got, want) {
			t.Errorf("chatctl %s: docs/operations.md lists the flags %v, chatctl help %v", name, got, want)
		}
	}
}
