package main

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestPlainError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("t1: %w %s", kerr.InvalidRequest, "replica assignment names broker 9"), "t1: INVALID_REQUEST replica assignment names broker 9"},
		{fmt.Errorf("%w (%s)", kerr.PolicyViolation, "too many partitions"), "POLICY_VIOLATION (too many partitions)"},
		// Nothing from the broker: the code's description stays.
		{fmt.Errorf("t1: %w ", kerr.InvalidRequest), "t1: " + kerr.InvalidRequest.Error() + " "},
		{errors.New("plain"), "plain"},
	} {
		if got := plainError(c.err); got != c.want {
			t.Errorf("plainError(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestResetOffsetParsers(t *testing.T) {
	names, parts, err := parseResetTopics([]string{"a", "b:0,2", "b:3"})
	if err != nil || len(names) != 2 || parts["a"] != nil || len(parts["b"]) != 3 || !parts["b"][2] {
		t.Fatalf("parseResetTopics: %v %v %v", names, parts, err)
	}
	for _, bad := range []string{":1", "p3:x", "p3:-1", "p3:"} {
		if _, _, err := parseResetTopics([]string{bad}); err == nil {
			t.Errorf("parseResetTopics(%q) accepted", bad)
		}
	}
	for in, want := range map[string]time.Duration{
		"P1DT2H3M4.5S": 26*time.Hour + 3*time.Minute + 4500*time.Millisecond,
		"PT15M":        15 * time.Minute,
		"p2d":          48 * time.Hour,
		"90m":          90 * time.Minute,
	} {
		if got, err := parseISODuration(in); err != nil || got != want {
			t.Errorf("parseISODuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"P", "PT", "1D", "-5m", "P1H"} {
		if _, err := parseISODuration(bad); err == nil {
			t.Errorf("parseISODuration(%q) accepted", bad)
		}
	}
	if ts, err := parseResetTime("2026-01-02T15:04:05.123"); err != nil || ts.Year() != 2026 || ts.Nanosecond() != 123e6 {
		t.Errorf("parseResetTime Kafka format: %v %v", ts, err)
	}
	if _, err := parseResetTime("yesterday"); err == nil {
		t.Error("parseResetTime accepted yesterday")
	}
}
