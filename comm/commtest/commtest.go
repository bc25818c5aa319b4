// Package commtest starts the ranks of a job inside one test process,
// over loopback, for tests that need real groups without starting
// processes, and reads the output of jobs that tests start.
package commtest

import (
	"context"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun/gorun/comm"
)

// Groups joins n ranks of a job in this process over loopback and closes
// them all at once when the test ends, as separate processes would. opts
// are added to each rank's settings (say comm.WithTimeout).
func Groups(t testing.TB, n int, opts ...comm.Option) []*comm.Group {
	t.Helper()
	gs, errs := Join(t, n, func(int) []comm.Option { return opts })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, g := range gs {
			wg.Go(func() { g.Close() })
		}
		wg.Wait()
	})
	return gs
}

// Join joins n ranks of a job in this process over loopback, rank r with
// the options opts(r) adds to the job's, and returns each rank's group,
// or its error; the caller closes the groups.
func Join(t testing.TB, n int, opts func(r int) []comm.Option) ([]*comm.Group, []error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	gs := make([]*comm.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			all := append([]comm.Option{comm.WithRank(r, n), comm.WithMaster("127.0.0.1", port),
				comm.WithToken("commtest"), comm.WithJoinTimeout(20 * time.Second)}, opts(r)...)
			gs[r], errs[r] = comm.Init(context.Background(), all...)
		})
	}
	wg.Wait()
	return gs, errs
}

// WantErrors fails the test unless every rank's error (errs, by rank)
// says want, or, for want "", every rank succeeded.
func WantErrors(t testing.TB, errs []error, want string) {
	t.Helper()
	for r, err := range errs {
		switch {
		case want == "" && err != nil:
			t.Errorf("rank %d: %v", r, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("rank %d: got %v, want an error saying %q", r, err, want)
		}
	}
}

// EachRank runs fn for every group at once and fails the test on the
// first error, naming the rank.
func EachRank(t testing.TB, gs []*comm.Group, fn func(g *comm.Group) error) {
	t.Helper()
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = fn(g) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// rankLabel is the "[rank] " label gorun puts on every line.
var rankLabel = regexp.MustCompile(`^\[(\d+)\] (.*)$`)

// RankLines splits a job's output by the "[rank] " labels on its lines;
// unlabelled lines are left out.
func RankLines(out string) map[int][]string {
	lines := map[int][]string{}
	for _, l := range strings.Split(out, "\n") {
		if m := rankLabel.FindStringSubmatch(l); m != nil {
			r, _ := strconv.Atoi(m[1])
			lines[r] = append(lines[r], m[2])
		}
	}
	return lines
}

// EndsOK reports whether the last of a rank's lines that is not one of
// the library's "comm: " diagnostics is "OK". The diagnostics go to
// standard error and the program's own lines to standard output: the
// launcher relays the two streams independently, so a diagnostic written
// before a program's last line can still be relayed after it.
func EndsOK(lines []string) bool {
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.HasPrefix(lines[i], "comm: ") {
			return lines[i] == "OK"
		}
	}
	return false
}
