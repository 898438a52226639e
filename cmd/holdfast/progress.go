package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress draws a one-line progress bar on a terminal (stderr), redrawn at
// most ten times a second; on anything else it draws nothing.
type progress struct {
	w    io.Writer
	mu   sync.Mutex
	last time.Time
	drew bool
}

func newProgress(w io.Writer) *progress {
	if f, ok := w.(*os.File); !ok || !isTerminal(f) {
		return &progress{}
	}
	return &progress{w: w}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// set shows what: done of total, and a note after the bar.
func (p *progress) set(what string, done, total int64, note string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond && done < total {
		return
	}
	p.last = time.Now()
	const width = 30
	n := 0
	if total > 0 {
		n = int(min(done, total) * width / total)
	}
	fmt.Fprintf(p.w, "\r\033[K%-8s [%s%s] %d/%d %s", what, strings.Repeat("#", n), strings.Repeat(".", width-n), done, total, note)
	p.drew = true
}

// done clears the bar.
func (p *progress) done() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drew {
		fmt.Fprint(p.w, "\r\033[K")
		p.drew = false
	}
}
