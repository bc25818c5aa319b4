package launch

import (
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// StatusTerminal writes the job's output lines to a terminal while keeping
// one status line — rank 0's progress bar (Config.Status) — at the bottom,
// as pip and cargo keep a bar under scrolling output: every line written
// goes above the status line, which SetStatus redraws in place. It is
// safe for concurrent use.
type StatusTerminal struct {
	mu     sync.Mutex
	w      io.Writer
	width  int // columns; a longer status is cut to fit (0: never cut)
	status string
	drawn  bool // the status line is on the screen
	buf    []byte
}

// NewStatusTerminal returns a StatusTerminal writing to w, a terminal
// width columns wide (0 when unknown).
func NewStatusTerminal(w io.Writer, width int) *StatusTerminal {
	return &StatusTerminal{w: w, width: width}
}

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\033[K"

// Write implements io.Writer for whole lines (the launcher writes nothing
// else): they go above the status line, which is drawn again below them.
func (t *StatusTerminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = t.buf[:0]
	if t.drawn {
		t.buf = append(t.buf, clearLine...)
	}
	t.buf = append(t.buf, p...)
	t.drawn = t.status != ""
	t.buf = append(t.buf, t.status...)
	if _, err := t.w.Write(t.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// SetStatus replaces the status line. Control characters in it (a rank's
// own carriage returns or escape sequences) are dropped, and it is cut to
// the terminal's width, so that it always stays one line.
func (t *StatusTerminal) SetStatus(line string) {
	line = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, line)
	if t.width > 1 && utf8.RuneCountInString(line) > t.width-1 {
		line = string([]rune(line)[:t.width-1])
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.status = line
	t.buf = append(append(t.buf[:0], clearLine...), line...)
	t.drawn = line != ""
	t.w.Write(t.buf) // a terminal that fails shows nothing either way
}

// Close ends the status line, leaving its last text on the screen, so that
// what follows starts on a line of its own.
func (t *StatusTerminal) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.status = ""
	if !t.drawn {
		return nil
	}
	t.drawn = false
	_, err := io.WriteString(t.w, "\n")
	return err
}
