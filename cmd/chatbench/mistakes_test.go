package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// What a user of chatbench got wrong was told in the flag package's words
// under the whole list of flags ("invalid value "10" for flag -duration:
// parse error"), or not at all: a -url with the WebSocket path waited 2
// minutes for /v1/ws/healthz without a word, -plot without a sweep wrote
// no plot, and an empty -admin-token-file was told "no admin token: pass
// -admin-token or set CHAT_ADMIN_TOKEN". Each is refused with what to
// give instead.
func TestFlagMistakesSayWhatToDo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-duration", "10"}, `-duration "10": want a duration such as 10s, 90m or 168h`},
		{[]string{"-rate", "fast"}, `-rate "fast": want a number (messages per second`},
		{[]string{"-nope"}, "flag provided but not defined: -nope; chatbench -h lists the flags"},
		{[]string{"-admin-token", "t", "extra"}, `unexpected argument "extra"; chatbench takes flags only (chatbench -h lists them)`},
		{[]string{"-admin-token", "t", "-url", "http://127.0.0.1:8080/v1/ws"}, `-url "http://127.0.0.1:8080/v1/ws": want the gateway's base URL, http://127.0.0.1:8080, without chatd's paths`},
		{[]string{"-admin-token", "t", "-plot", "x.png"}, "-plot x.png draws latency against the rate of several steps: add -sweep R,R,... or -find-max, or drop -plot"},
	} {
		var out strings.Builder
		_, err := parseConfig(c.args, func(string) string { return "" }, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("chatbench %v: %v; want %q", c.args, err, c.want)
		}
		if strings.Contains(out.String(), "-concurrency") {
			t.Errorf("chatbench %v printed the list of flags above its error:\n%.300s", c.args, out.String())
		}
	}
	empty := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file string
		want string
	}{
		{"/nonexistent/admin-token", "-admin-token-file: open /nonexistent/admin-token: no such file or directory; name the file that holds the admin token (chatd dev keeps it in <data-dir>/admin-token"},
		{empty, "-admin-token-file " + empty + " is empty; name the file that holds the admin token"},
	} {
		if _, err := parseConfig([]string{"-admin-token-file", c.file}, func(string) string { return "" }, &strings.Builder{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("chatbench -admin-token-file %s: %v; want %q", c.file, err, c.want)
		}
	}
	if _, err := parseConfig([]string{"-admin-token", "t", "-url", "http://127.0.0.1:8080/", "-sweep", "10,20", "-plot", "x.png"}, func(string) string { return "" }, &strings.Builder{}); err != nil {
		t.Errorf("a -url with a trailing / and -plot with -sweep: %v; want them taken", err)
	}
}

// Waiting for a chatd that does not answer, and stopped meanwhile
// (Ctrl-C), ended with "context canceled" alone: it says what it waited
// for and what it last got.
func TestAWaitForAChatdThatDoesNotAnswerSaysWhatItWaitedFor(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = newAPI(base, "", 1).waitHealthy(ctx, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "chatd at "+base+" was not healthy yet when chatbench was stopped") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("a wait for %s, where nothing listens, stopped: %v; want what it waited for and why", base, err)
	}
}
