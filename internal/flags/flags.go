// Package flags parses the command lines of chatd and chatctl: a value a
// flag cannot take is answered with what the flag wants, not with the flag
// package's "parse error" after the whole list of flags, which -h prints.
package flags

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Parse parses args into fs. On -h it prints fs's flags to fs's output and
// returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard) // the flag package prints its errors too
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(out, "Flags of %s:\n", fs.Name())
		// A default may come from the environment: a secret's is not
		// printed, as terminals and CI logs keep what -h shows.
		fs.VisitAll(func(f *flag.Flag) {
			if Secret(f.Name) && f.DefValue != "" {
				f.DefValue = "(set, not shown)"
			}
		})
		fs.PrintDefaults()
		return err
	}
	if err != nil {
		return Explain(fs, err)
	}
	return nil
}

// invalidValue matches the flag package's error for a value a flag cannot
// take.
var invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-([^:]+): `)

// Explain rewrites an error of fs.Parse to say what went wrong and what to
// do.
func Explain(fs *flag.FlagSet, err error) error {
	m := invalidValue.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%v; %s -h lists the flags", err, fs.Name())
	}
	f := fs.Lookup(m[2])
	if f == nil {
		return err
	}
	value, uerr := strconv.Unquote(`"` + m[1] + `"`)
	if uerr != nil {
		value = m[1]
	}
	why := ""
	if reason := strings.TrimSpace(err.Error()[len(m[0]):]); reason != "parse error" {
		why = " (" + reason + ")" // e.g. "value out of range"
	}
	return fmt.Errorf("-%s %q%s: want %s (%s)", f.Name, value, why, Want(f.Value), f.Usage)
}

// Want says what a flag's value must look like.
func Want(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return "a valid value"
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration such as 10s, 90m or 168h (units: ns, us, ms, s, m, h; no d)"
	case int, int64, uint, uint64:
		return "a whole number"
	case float64:
		return "a number"
	case bool:
		return "true or false"
	}
	return "a valid value"
}

// Env is a variable whose value is a flag's default.
type Env struct{ Name, Flag, Usage string }

// CheckEnv refuses a variable of envs whose value its flag cannot take,
// naming it: bound as the flag's default, the value was dropped without a
// word. A flag given instead of it wins. Call it after Parse.
func CheckEnv(fs *flag.FlagSet, getenv func(string) string, envs []Env) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, e := range envs {
		v := getenv(e.Name)
		f := fs.Lookup(e.Flag)
		if v == "" || given[e.Flag] || f == nil {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			return fmt.Errorf("%s=%q: want %s; %s", e.Name, v, Want(f.Value), e.Usage)
		}
	}
	return nil
}

// Secret reports whether the flag named name holds a secret (a password,
// a token or a signing secret), whose value is never printed.
func Secret(name string) bool {
	for _, w := range []string{"password", "secret", "token"} {
		if name == w || strings.HasSuffix(name, "-"+w) { // not max-token-ttl
			return true
		}
	}
	return false
}
