package launch

import (
	"bytes"
	"sync"
)

// Buffer collects a job's output: Config.Stdout and Config.Stderr are
// written from concurrent copiers, so a plain bytes.Buffer would race.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
