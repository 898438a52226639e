package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"holdfast/internal/broker"
)

// settings is the one registry of a command's settings (serve,
// dev-cluster). Each setting is
//   - a flag, --data-dir;
//   - an environment variable, HOLDFAST_DATA_DIR (derived from the flag);
//   - optionally one or more Kafka broker config names, log.dirs, under which
//     a Kafka server.properties given to --config may set it;
//   - its help text.
//
// A value is taken from the flag, else the environment, else the --config
// file (flag names or Kafka names), else the default. A feature adds its
// settings with one call per setting (s.String, s.Int, ...) next to the
// code that uses them; help, environment and file support follow.
type settings struct {
	fs    *pflag.FlagSet
	all   []*setting
	kafka map[string]kafkaName // by Kafka name
	pass  []passthrough
	// origins says where load took each setting from, by flag name, and
	// passOrigins each passthrough name: what DescribeConfigs reports
	// (configOrigins).
	origins, passOrigins map[string]broker.ConfigOrigin
}

// passthrough is a family of Kafka config names a feature reads itself,
// by their Kafka names and values as they are (security: ssl.*, sasl.*,
// listener.name.*, ...): they are collected into a map for it rather
// than mapped onto flags, and the feature checks them.
type passthrough struct {
	match func(name string) bool
	into  map[string]string
}

type setting struct {
	flag   string
	kafka  []kafkaName
	secret bool // values are never repeated in errors
	// repeatable: each value adds to the others (its flag type's Set
	// appends), from every source: the command line, --override, the
	// environment and the file add up instead of the first hiding the
	// rest (a broker given one more --add-scram user on the command line
	// kept the file's admin).
	repeatable bool
}

// appender is a flag type whose Set adds a value to the ones it has.
type appender interface{ appends() }

// kafkaName is a Kafka broker config name for a setting and how a Kafka
// value is turned into the flag's syntax (nil: taken as it is).
type kafkaName struct {
	name    string
	convert func(string) (string, error)
	s       *setting
}

func newSettings(fs *pflag.FlagSet) *settings {
	return &settings{fs: fs, kafka: map[string]kafkaName{}}
}

// kafka names a setting's Kafka config whose value is taken as it is.
func kafka(name string) kafkaName { return kafkaName{name: name} }

// kafkaDuration names a Kafka config given as a whole number of unit
// (log.retention.ms: milliseconds); a negative number stays negative
// (unlimited).
func kafkaDuration(name string, unit time.Duration) kafkaName {
	return kafkaName{name: name, convert: func(v string) (string, error) {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return "", fmt.Errorf("want a whole number of %s", unitName(unit))
		}
		return (time.Duration(n) * unit).String(), nil
	}}
}

func unitName(u time.Duration) string {
	switch u {
	case time.Millisecond:
		return "milliseconds"
	case time.Second:
		return "seconds"
	case time.Minute:
		return "minutes"
	case time.Hour:
		return "hours"
	}
	return u.String()
}

// kafkaConverted names a Kafka config whose value convert turns into the
// flag's syntax.
func kafkaConverted(name string, convert func(string) (string, error)) kafkaName {
	return kafkaName{name: name, convert: convert}
}

func (s *settings) add(flag, help string, names []kafkaName) {
	st := &setting{flag: flag}
	var kn []string
	for _, k := range names {
		if _, dup := s.kafka[k.name]; dup {
			panic("settings: Kafka name " + k.name + " registered twice")
		}
		k.s = st
		s.kafka[k.name] = k
		st.kafka = append(st.kafka, k)
		kn = append(kn, k.name)
	}
	f := s.fs.Lookup(flag)
	f.Usage = help
	if len(kn) > 0 {
		f.Usage += " [Kafka: " + strings.Join(kn, ", ") + "]"
	}
	f.Usage += " [env " + envName(flag) + "]"
	s.all = append(s.all, st)
}

// Passthrough hands the Kafka config names match accepts, from the
// --config file and from --override, to into as they are.
func (s *settings) Passthrough(match func(name string) bool, into map[string]string) {
	s.pass = append(s.pass, passthrough{match, into})
}

// Secret registers a setting of a custom flag type whose values hold
// passwords: errors never repeat them. A repeatable one (an appender)
// takes every value given anywhere: flags, --override, its environment
// variable and every line of the file that names it.
func (s *settings) Secret(v pflag.Value, flag, help string, names ...kafkaName) {
	s.fs.Var(v, flag, "")
	s.add(flag, help, names)
	st := s.all[len(s.all)-1]
	st.secret = true
	_, st.repeatable = v.(appender)
}

// set sets a flag; the error of a secret one does not repeat its value.
func (s *settings) set(flag, value string) error {
	err := s.fs.Set(flag, value)
	if err != nil {
		if st := s.byFlag(flag); st != nil && st.secret {
			return errors.New(strings.ReplaceAll(err.Error(), strconv.Quote(value), `"..."`))
		}
	}
	return err
}

func (s *settings) String(p *string, flag, def, help string, names ...kafkaName) {
	s.fs.StringVar(p, flag, def, "")
	s.add(flag, help, names)
}

func (s *settings) Int(p *int, flag string, def int, help string, names ...kafkaName) {
	s.fs.IntVar(p, flag, def, "")
	s.add(flag, help, names)
}

func (s *settings) Int64(p *int64, flag string, def int64, help string, names ...kafkaName) {
	s.fs.Int64Var(p, flag, def, "")
	s.add(flag, help, names)
}

func (s *settings) Bool(p *bool, flag string, def bool, help string, names ...kafkaName) {
	s.fs.BoolVar(p, flag, def, "")
	s.add(flag, help, names)
}

func (s *settings) Duration(p *time.Duration, flag string, def time.Duration, help string, names ...kafkaName) {
	s.fs.DurationVar(p, flag, def, "")
	s.add(flag, help, names)
}

// envName is the environment variable that can set a flag:
// --data-dir is HOLDFAST_DATA_DIR.
func envName(flagName string) string {
	return "HOLDFAST_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// load fills every setting not given on the command line from
// overrides (--override key=value: Kafka names or flag names, with the
// command line's precedence), then from its environment variable, then
// from the file at configPath (if not empty). It returns the Kafka names
// Holdfast does not support, each once, sorted: the caller reports them.
// A name that looks like a Holdfast flag (no dot) and is not one is an
// error: it is a typo.
func (s *settings) load(configPath string, overrides []string) (unsupported []string, err error) {
	set := map[string]bool{}     // flags given on the command line or in the environment
	passSet := map[string]bool{} // passthrough names given with --override
	seen := map[string]bool{}    // unsupported names reported
	s.origins, s.passOrigins = map[string]broker.ConfigOrigin{}, map[string]broker.ConfigOrigin{}
	for _, st := range s.all {
		if s.fs.Changed(st.flag) {
			set[st.flag] = true
			s.origins[st.flag] = st.origin(broker.OriginFlag, "--"+st.flag, s.fs.Lookup(st.flag).Value.String(), "")
		}
	}
	// apply takes one key=value from --override or the file; where says
	// where it came from, for errors.
	apply := func(where, k, v string, override bool) error {
		flag, value, pass, err := s.resolve(k, v)
		o := broker.ConfigOrigin{Kind: broker.OriginFile, Name: k, File: configPath}
		if override {
			o = broker.ConfigOrigin{Kind: broker.OriginFlag, Name: "--override " + k}
		}
		switch {
		case err != nil:
			return fmt.Errorf("%s: %s=%s: %w", where, k, v, err)
		case pass != nil:
			if override {
				passSet[k] = true
			} else if passSet[k] {
				return nil // --override wins over the file
			}
			pass.into[k] = value
			if !mayBeSecret(k) {
				o.Value = &v
			}
			s.passOrigins[k] = o
			return nil
		case flag == "":
			if !strings.Contains(k, ".") {
				return fmt.Errorf("%s: unknown setting %q (see holdfast serve -h)", where, k)
			}
			if !seen[k] {
				seen[k] = true
				unsupported = append(unsupported, k)
			}
			return nil
		case s.byFlag(flag).repeatable:
			// Adds to what the command line and the environment gave.
		case override && set[flag]:
			return fmt.Errorf("%s: %s sets --%s, which the command line sets too", where, k, flag)
		case !override && set[flag]:
			return nil // the command line or the environment wins
		}
		if err := s.set(flag, value); err != nil {
			return fmt.Errorf("%s: %s: %w", where, k, err)
		}
		if _, had := s.origins[flag]; !had { // a repeatable one keeps the first
			st := s.byFlag(flag)
			s.origins[flag] = st.origin(o.Kind, o.Name, v, o.File)
		}
		return nil
	}
	for _, o := range overrides {
		k, v, ok := strings.Cut(o, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("--override %q: want key=value", o)
		}
		if err := apply("--override", k, strings.TrimSpace(v), true); err != nil {
			return nil, err
		}
	}
	for _, st := range s.all {
		if s.fs.Changed(st.flag) && !st.repeatable {
			set[st.flag] = true
			continue
		}
		if v, ok := os.LookupEnv(envName(st.flag)); ok {
			if st.secret {
				if err := s.set(st.flag, v); err != nil {
					return nil, fmt.Errorf("%s: %w", envName(st.flag), err)
				}
			} else if err := s.fs.Set(st.flag, v); err != nil {
				return nil, fmt.Errorf("%s=%q: %w", envName(st.flag), v, err)
			}
			set[st.flag] = true
			if _, had := s.origins[st.flag]; !had {
				s.origins[st.flag] = st.origin(broker.OriginEnv, envName(st.flag), v, "")
			}
		}
	}
	if configPath != "" {
		f, err := os.Open(configPath)
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		defer f.Close()
		props, err := readProperties(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", configPath, err)
		}
		for _, p := range props {
			if err := apply(fmt.Sprintf("%s:%d", configPath, p.line), p.key, p.value, false); err != nil {
				return nil, err
			}
		}
	}
	sort.Strings(unsupported)
	return unsupported, nil
}

// mayBeSecret reports whether a passthrough name (ssl.*, sasl.*, ...)
// may hold a password or a key, whose value DescribeConfigs must not
// repeat.
func mayBeSecret(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"password", "secret", "key", "jaas", "token", "credential"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// origin is a ConfigOrigin of st: the value as written, none for a
// secret.
func (st *setting) origin(kind, name, value, file string) broker.ConfigOrigin {
	o := broker.ConfigOrigin{Kind: kind, Name: name, File: file}
	if !st.secret {
		o.Value = &value
	}
	return o
}

// configOrigins is where load took each setting from, by every broker
// config name DescribeConfigs reports it under: its Kafka names, the
// names in also (by flag: config names that are no Kafka name of the
// setting, holdfast.flush.policy for --flush) and the passthrough names.
// Never nil: a setting not in it is a default.
func (s *settings) configOrigins(also map[string][]string) map[string]broker.ConfigOrigin {
	out := map[string]broker.ConfigOrigin{}
	for _, st := range s.all {
		o, ok := s.origins[st.flag]
		if !ok {
			continue
		}
		for _, k := range st.kafka {
			out[k.name] = o
		}
		for _, n := range also[st.flag] {
			out[n] = o
		}
	}
	for k, o := range s.passOrigins {
		out[k] = o
	}
	return out
}

// resolve finds what a Kafka or flag name sets: a flag (with the value in
// the flag's syntax), or a passthrough family. Neither: unsupported.
func (s *settings) resolve(k, v string) (flag, value string, pass *passthrough, err error) {
	if st := s.byFlag(k); st != nil {
		return st.flag, v, nil, nil
	}
	if kn, ok := s.kafka[k]; ok {
		if kn.convert != nil {
			if v, err = kn.convert(v); err != nil {
				return "", "", nil, err
			}
		}
		return kn.s.flag, v, nil, nil
	}
	for i := range s.pass {
		if s.pass[i].match(k) {
			return "", v, &s.pass[i], nil
		}
	}
	return "", "", nil, nil
}

func (s *settings) byFlag(name string) *setting {
	for _, st := range s.all {
		if st.flag == name {
			return st
		}
	}
	return nil
}

type property struct {
	key, value string
	line       int
}

// readProperties reads a Java properties file as Kafka's server.properties
// is written: key=value, key: value or key value; '#' and '!' comments;
// a trailing backslash continues a line.
func readProperties(r io.Reader) ([]property, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []property
	var cont strings.Builder
	start := 0
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if cont.Len() == 0 {
			if text == "" || text[0] == '#' || text[0] == '!' {
				continue
			}
			start = line
		}
		if strings.HasSuffix(text, `\`) && !strings.HasSuffix(text, `\\`) {
			cont.WriteString(strings.TrimSuffix(text, `\`))
			continue
		}
		cont.WriteString(text)
		full := cont.String()
		cont.Reset()
		i := strings.IndexAny(full, "=: \t")
		if i <= 0 {
			return nil, fmt.Errorf("line %d: want key=value", start)
		}
		k := full[:i]
		v := strings.TrimLeft(full[i:], " \t")
		if v != "" && (v[0] == '=' || v[0] == ':') {
			v = strings.TrimSpace(v[1:])
		}
		out = append(out, property{k, v, start})
	}
	if cont.Len() > 0 {
		return nil, fmt.Errorf("line %d: continued past the end of the file", start)
	}
	return out, sc.Err()
}
