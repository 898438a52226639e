package faulttest

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// The nodes poison the frames they put back (a holder reading a frame
	// after its release reads garbage: internal/wire poisonFrames).
	os.Setenv("HOLDFAST_POISON_FRAMES", "1")
	code := m.Run()
	CleanupBinary()
	os.Exit(code)
}
