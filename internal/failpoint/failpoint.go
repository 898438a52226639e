// Package failpoint lets a fault test stop a node at a named step of its
// work, deterministically, to kill it there (SIGKILL), cut its network or
// move its leadership while it stands still: no timing, no luck.
//
// It is off unless the environment names a file,
// HOLDFAST_FAILPOINTS_FILE, that the test writes: one failpoint name a
// line. A step that calls Hit with a name in the file logs
// "failpoint reached" with the name and waits until the name leaves the
// file (or its context ends); the test arms and releases failpoints by
// rewriting the file while the node runs. Without the variable Hit returns
// at once and costs one comparison.
package failpoint

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"
)

// EnvFile names the environment variable holding the failpoint file.
const EnvFile = "HOLDFAST_FAILPOINTS_FILE"

var file = os.Getenv(EnvFile)

// poll is how often a held step looks at the file again.
const poll = 10 * time.Millisecond

// Hit stops the caller while failpoint name is armed (see the package
// comment); it returns ctx's error if ctx ended first.
func Hit(ctx context.Context, name string, log *slog.Logger) error {
	if file == "" || !armed(name) {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	log.Warn("failpoint reached", "failpoint", name)
	t := time.NewTicker(poll)
	defer t.Stop()
	for armed(name) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	log.Warn("failpoint released", "failpoint", name)
	return nil
}

// armed reports whether name is a line of the failpoint file.
func armed(name string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == name {
			return true
		}
	}
	return false
}
