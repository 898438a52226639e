package main

import (
	"errors"
	"fmt"
	"testing"

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
