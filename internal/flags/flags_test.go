package flags

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func newSet() *flag.FlagSet {
	fs := flag.NewFlagSet("chatctl token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Duration("ttl", 24*time.Hour, "how long the token is valid")
	fs.Int("partitions", 16, "partitions of each topic")
	fs.Bool("follow", false, "wait for new records")
	return fs
}

// A value a flag cannot take is answered with what it wants; a flag that
// does not exist, with where the flags are listed; -h lists them.
func TestParseSaysWhatAFlagWants(t *testing.T) {
	for args, want := range map[string]string{
		"-ttl 7d":                          `-ttl "7d": want a duration such as 10s, 90m or 168h (units: ns, us, ms, s, m, h; no d) (how long the token is valid)`,
		"-partitions abc":                  `-partitions "abc": want a whole number (partitions of each topic)`,
		"-follow=maybe":                    `-follow "maybe": want true or false`,
		"-nope 1":                          `flag provided but not defined: -nope; chatctl token -h lists the flags`,
		"-partitions 99999999999999999999": `-partitions "99999999999999999999" (value out of range): want a whole number`,
		`-ttl 1"h`:                         `-ttl "1\"h": want a duration`,
	} {
		err := Parse(newSet(), strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", args, err, want)
		}
	}
	fs := newSet()
	var out strings.Builder
	fs.SetOutput(&out)
	if err := Parse(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "-ttl duration") {
		t.Errorf("-h: %v, printed %q; want flag.ErrHelp and the flags", err, out.String())
	}
	fs = newSet()
	fs.SetOutput(&out)
	out.Reset()
	if err := Parse(fs, []string{"-ttl", "7d"}); err == nil || out.Len() != 0 {
		t.Errorf("a bad value printed %q; want nothing but the error", out.String())
	}
}

// A variable whose value its flag cannot take is refused, naming the
// variable and what it wants; a flag given instead wins.
func TestCheckEnvNamesTheVariable(t *testing.T) {
	envs := []Env{{"CHAT_TTL", "ttl", "token lifetime"}, {"CHAT_PARTITIONS", "partitions", "partitions of each topic"}}
	env := map[string]string{"CHAT_TTL": "7d", "CHAT_PARTITIONS": "16"}
	fs := newSet()
	if err := Parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	err := CheckEnv(fs, func(k string) string { return env[k] }, envs)
	if want := `CHAT_TTL="7d": want a duration such as 10s`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckEnv: %v; want %q", err, want)
	}
	fs = newSet()
	if err := Parse(fs, []string{"-ttl", "1h"}); err != nil {
		t.Fatal(err)
	}
	if err := CheckEnv(fs, func(k string) string { return env[k] }, envs); err != nil {
		t.Errorf("CheckEnv with -ttl given: %v; want none", err)
	}
}

// -h prints each flag's default, which may come from the environment: a
// password, token or secret is not printed (it went to terminals and CI
// logs).
func TestHelpLeavesOutTheSecretsItWasGiven(t *testing.T) {
	fs := flag.NewFlagSet("chatd gateway", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	for _, name := range []string{"kafka-sasl-password", "jwt-secret", "admin-token"} {
		fs.String(name, "hunter2-"+name, "from the environment")
	}
	fs.String("kafka-brokers", "k1:9092", "not a secret")
	fs.Duration("max-token-ttl", 720*time.Hour, "not a secret either")
	if err := Parse(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if strings.Contains(out.String(), "hunter2") || !strings.Contains(out.String(), "k1:9092") || !strings.Contains(out.String(), "720h0m0s") {
		t.Errorf("-h printed:\n%s\nwant the brokers and no secret", out.String())
	}
}
