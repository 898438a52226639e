package main

import (
	"flag"
	"strings"
	"testing"
)

func TestUnknownEnvReported(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.String("data-dir", "", "")
	fs.String("flush", "sync", "")
	got := unknownEnv(fs, []string{"HOLDFAST_DATA_DIR=/x", "HOLDFAST_DATADIR=/y", "HOLDFAST_NOTHING_LIKE_IT=1", "PATH=/bin", "HOLDFAST_FLUSH=os"})
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
