package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestUnknownEnvReported(t *testing.T) {
	s := newSettings(pflag.NewFlagSet("serve", pflag.ContinueOnError))
	var dir, flush string
	s.String(&dir, "data-dir", "", "")
	s.String(&flush, "flush", "sync", "")
	got := s.unknownEnv([]string{"HOLDFAST_DATA_DIR=/x", "HOLDFAST_DATADIR=/y", "HOLDFAST_NOTHING_LIKE_IT=1", "PATH=/bin", "HOLDFAST_FLUSH=os", "HOLDFAST_CONFIG=/c", "HOLDFAST_COMMAND_CONFIG=admin.properties", "HOLDFAST_BOOTSTRAP=h:9093"})
	if len(got) != 2 {
		t.Fatalf("reported %q; want the two unknown HOLDFAST_ variables", got)
	}
	if !strings.Contains(got[0], "HOLDFAST_DATADIR") || !strings.Contains(got[0], "did you mean HOLDFAST_DATA_DIR?") {
		t.Fatalf("typo report %q", got[0])
	}
	if !strings.Contains(got[1], "HOLDFAST_NOTHING_LIKE_IT matches no setting") || strings.Contains(got[1], "did you mean") {
		t.Fatalf("unknown report %q", got[1])
	}
}
