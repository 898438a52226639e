package main

import (
	"strings"

	"holdfast/internal/failpoint"
)

// Float64 registers a float setting (rates, ratios).
func (s *settings) Float64(p *float64, flag string, def float64, help string, names ...kafkaName) {
	s.fs.Float64Var(p, flag, def, "")
	s.add(flag, help, names)
}

// unknownEnv lists the HOLDFAST_* variables of environ that set none of the
// command's settings, each with the closest setting's variable when one is
// near (a likely typo). serve reports them at start-up, as Kafka reports
// supplied configs that are not known ones: silently ignoring a setting is
// worse than saying so. (Not refused: test harnesses pass their own
// HOLDFAST_* knobs down to the brokers they start.)
func (s *settings) unknownEnv(environ []string) []string {
	// HOLDFAST_CONFIG, and the client commands' variables (a shell that
	// runs both exports them).
	// The fault tests' failpoint file (internal/failpoint) is read, not a
	// setting.
	known := map[string]bool{envName("config"): true, "HOLDFAST_BOOTSTRAP": true, "HOLDFAST_COMMAND_CONFIG": true, "HOLDFAST_PASSWORD": true,
		failpoint.EnvFile: true}
	var names []string
	for _, st := range s.all {
		known[envName(st.flag)] = true
		names = append(names, envName(st.flag))
	}
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
