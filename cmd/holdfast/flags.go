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
//
// With kafka set, config file keys that are Kafka security settings
// (kafkaSecurityKey) go into it instead, unless --override set them.
func parseLayered(fs *flag.FlagSet, args []string, configFlag string, kafka ...props) error {
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
		if fs.Lookup(k) == nil && len(kafka) > 0 && kafkaSecurityKey(k) {
			if _, overridden := kafka[0][k]; !overridden {
				kafka[0][k] = v
			}
			continue
		}
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
