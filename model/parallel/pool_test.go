package parallel

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countTask records which indices ran, how often, and on which workers.
type countTask struct {
	calls   []atomic.Int32
	workers []atomic.Int32
	threads int
	bad     atomic.Int32 // calls with a worker index out of range
}

func newCountTask(n, threads int) *countTask {
	return &countTask{calls: make([]atomic.Int32, n), workers: make([]atomic.Int32, threads), threads: threads}
}

func (c *countTask) Do(worker, i int) {
	if worker < 0 || worker >= c.threads {
		c.bad.Add(1)
		return
	}
	c.workers[worker].Add(1)
	c.calls[i].Add(1)
}

// TestRun: every index of every Run is done exactly once, on a worker in
// range, whatever the pool's size and the number of indices, and whether
// the workers are spinning (Runs back to back) or asleep (a pause longer
// than spinFor before the Run).
func TestRun(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		p := New(threads)
		for _, pause := range []time.Duration{0, 2 * spinFor} {
			for n := range 12 {
				for round := range 20 {
					if pause > 0 && round%5 == 0 {
						time.Sleep(pause)
					}
					c := newCountTask(n, threads)
					p.Run(n, c)
					if c.bad.Load() != 0 {
						t.Fatalf("threads %d, n %d: %d calls with a worker out of range", threads, n, c.bad.Load())
					}
					for i := range c.calls {
						if got := c.calls[i].Load(); got != 1 {
							t.Fatalf("threads %d, n %d, pause %v, round %d: index %d ran %d times", threads, n, pause, round, i, got)
						}
					}
				}
			}
		}
		p.Close()
	}
}

// blockTask holds each call until release is closed, counting the calls
// under way.
type blockTask struct {
	running atomic.Int32
	release chan struct{}
}

func (b *blockTask) Do(int, int) {
	b.running.Add(1)
	<-b.release
}

// TestRunUsesEveryWorker: a Run of as many indices as threads, each
// waiting for the others, finishes only if every worker takes one at the
// same time — after the workers have slept and while they spin.
func TestRunUsesEveryWorker(t *testing.T) {
	const threads = 3
	p := New(threads)
	defer p.Close()
	for _, pause := range []time.Duration{2 * spinFor, 0} {
		time.Sleep(pause)
		b := &blockTask{release: make(chan struct{})}
		done := make(chan struct{})
		go func() {
			p.Run(threads, b)
			close(done)
		}()
		deadline := time.Now().Add(10 * time.Second)
		for b.running.Load() < threads {
			if time.Now().After(deadline) {
				t.Fatalf("after a pause of %v: %d of %d calls under way after 10 s", pause, b.running.Load(), threads)
			}
			time.Sleep(time.Millisecond)
		}
		close(b.release)
		<-done
	}
}

// TestConcurrentRunsSerialise: Runs from several goroutines at once each
// do all their indices exactly once.
func TestConcurrentRunsSerialise(t *testing.T) {
	p := New(3)
	defer p.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 200 {
				c := newCountTask(7, 3)
				p.Run(7, c)
				for i := range c.calls {
					if got := c.calls[i].Load(); got != 1 {
						errs <- fmt.Errorf("goroutine %d, round %d: index %d ran %d times", g, round, i, got)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCloseStopsWorkers: Close ends the worker goroutines, spinning or
// asleep.
func TestCloseStopsWorkers(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, pause := range []time.Duration{0, 2 * spinFor} {
		p := New(4)
		p.Run(4, newCountTask(4, 4))
		time.Sleep(pause)
		p.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 10 s after Close, %d before the pools", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// spinTask busy-waits for d in each call and counts the calls the
// helper workers made.
type spinTask struct {
	d      time.Duration
	helped atomic.Int64
}

func (s *spinTask) Do(worker, _ int) {
	if worker > 0 {
		s.helped.Add(1)
	}
	for t0 := time.Now(); time.Since(t0) < s.d; {
	}
}

// BenchmarkRun times a Run of two calls of a fixed length on two threads,
// back to back or after a gap of work on the calling goroutine alone (as
// a network's layers come one after another), and reports the share of
// calls the helper made (0.5 when the two always run side by side).
//
//	go test ./model/parallel -run '^$' -bench Run -count 3
func BenchmarkRun(b *testing.B) {
	for _, d := range []time.Duration{10 * time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond} {
		for _, gap := range []time.Duration{0, 100 * time.Microsecond} {
			b.Run(fmt.Sprintf("call=%v/gap=%v", d, gap), func(b *testing.B) {
				p := New(2)
				defer p.Close()
				s := &spinTask{d: d}
				var busy time.Duration
				for b.Loop() {
					if gap > 0 {
						t0 := time.Now()
						for time.Since(t0) < gap {
						}
						busy += time.Since(t0)
					}
					p.Run(2, s)
				}
				b.ReportMetric(float64(b.Elapsed()-busy)/float64(b.N)/1e3, "µs/run")
				b.ReportMetric(float64(s.helped.Load())/float64(2*b.N), "helper-share")
			})
		}
	}
}
