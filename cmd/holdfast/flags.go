package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
)

// envName is the environment variable that can set a flag:
// --data-dir is HOLDFAST_DATA_DIR.
func envName(flagName string) string {
	return "HOLDFAST_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// parseLayered parses args into fs, then fills every flag not given on the
// command line from its HOLDFAST_* variable, then from the optional config
// file (key = value lines with the flag names, '#' comments). Precedence:
// flag, environment, file, default.
func parseLayered(fs *flag.FlagSet, args []string, configFlag string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			}
			set[f.Name] = true
		}
	})
	if err != nil || configFlag == "" {
		return err
	}
	path := fs.Lookup(configFlag).Value.String()
	if path == "" {
		return nil
	}
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		k, v, ok := strings.Cut(text, "=")
		if !ok {
			return fmt.Errorf("%s:%d: want key = value", path, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if fs.Lookup(k) == nil {
			return fmt.Errorf("%s:%d: unknown setting %q", path, line, k)
		}
		if set[k] {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, line, k, err)
		}
	}
	return sc.Err()
}

// flagUsage prints a command's flags with their environment variables.
func flagUsage(fs *flag.FlagSet, synopsis string) func() {
	return func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: holdfast %s\n\nFlags (each also settable as HOLDFAST_<NAME>):\n", synopsis)
		fs.PrintDefaults()
	}
}

// unknownEnv lists the HOLDFAST_* variables of the environment that set
// none of fs's flags, each with the closest flag's variable when one is
// near (a likely typo). serve reports them at start-up, as Kafka reports
// supplied configs that are not known ones: silently ignoring a setting
// is worse than saying so.
func unknownEnv(fs *flag.FlagSet, environ []string) []string {
	known := map[string]bool{}
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		known[envName(f.Name)] = true
		names = append(names, envName(f.Name))
	})
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "HOLDFAST_") || known[name] {
			continue
		}
		msg := name + " matches no setting of holdfast serve and is ignored"
		best, dist := "", 4
		for _, n := range names {
			if d := editDistance(name, n); d < dist {
				best, dist = n, d
			}
		}
		if best != "" {
			msg += "; did you mean " + best + "?"
		}
		out = append(out, msg)
	}
	return out
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
