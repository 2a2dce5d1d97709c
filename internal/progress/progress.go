// Package progress draws a one-line progress report on a terminal, and
// stays quiet when its output is not one.
package progress

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Bar reports progress of a long operation.
type Bar struct {
	w     io.Writer
	label string
	start time.Time
	last  time.Time
	shown bool
}

// New returns a Bar writing to f if f is a terminal, or nil (which is a
// valid Bar that does nothing) if it is not.
func New(f *os.File, label string) *Bar {
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return &Bar{w: f, label: label, start: time.Now()}
}

// Update shows done of total bytes, at most ten times a second.
func (b *Bar) Update(done, total int64) {
	if b == nil {
		return
	}
	now := time.Now()
	if now.Sub(b.last) < 100*time.Millisecond && done < total {
		return
	}
	b.last = now
	rate := float64(done) / now.Sub(b.start).Seconds() / (1 << 20)
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	fmt.Fprintf(b.w, "\r%s: %d/%d MiB (%.0f%%) %.0f MiB/s ", b.label, done>>20, total>>20, pct, rate)
	b.shown = true
}

// Done ends the line, if one was drawn; a later Update starts a new one.
func (b *Bar) Done() {
	if b != nil && b.shown {
		fmt.Fprintln(b.w)
		b.shown = false
	}
}
