// Package parallel runs loop bodies on a fixed set of worker goroutines.
//
// A Pool is created once with an explicit thread count (so several ranks on
// one machine can split its cores without oversubscribing them) and reused
// for every operation: Run allocates nothing, which keeps training steps free
// of garbage.
//
// Workers wait for the next Run spinning for a while (yielding to other
// goroutines as they do) before they sleep, and so does Run for its
// workers to finish. A sleeping goroutine on an idle core took 150–180 µs
// to wake on the development VMs — longer than many of a network's
// operations on small feature maps, whose second half then ran on the
// calling goroutine alone, after its first: the OpenMP runtimes behind
// PyTorch spin for the same reason.
package parallel

import (
	"runtime"
	"sync"
	"time"
)

// spinFor is how long a worker waits for the next Run, and Run for its
// workers, before sleeping.
const spinFor = 200 * time.Microsecond

// Task is a loop body. Do is called once for every index in [0, n) of a Run,
// with the index of the worker running it (0 ≤ worker < Pool.Threads()), so
// a task can keep per-worker scratch space without locks.
type Task interface {
	Do(worker, i int)
}

// Pool is a set of worker goroutines. The zero value is not usable; create
// one with New. A Pool runs one Run at a time; concurrent calls serialise.
type Pool struct {
	threads int
	mu      sync.Mutex // held by Run
	start   []chan job // one per worker goroutine, each holding at most one job
	done    chan struct{}
	next    counter // hands out indices of the current Run; guarded by mu
}

type job struct {
	task Task
	next *counter
	n    int
}

type counter struct {
	mu sync.Mutex
	i  int
}

func (c *counter) take(n int) int {
	c.mu.Lock()
	i := c.i
	if i < n {
		c.i++
	}
	c.mu.Unlock()
	return i
}

// New starts a pool of threads workers (the calling goroutine counts as one,
// so threads-1 goroutines are started). threads < 1 means 1.
func New(threads int) *Pool {
	threads = max(threads, 1)
	p := &Pool{threads: threads, start: make([]chan job, threads-1), done: make(chan struct{}, threads-1)}
	for w := range p.start {
		ch := make(chan job, 1)
		p.start[w] = ch
		go p.work(w+1, ch)
	}
	return p
}

// Threads returns the number of workers, the caller included.
func (p *Pool) Threads() int { return p.threads }

func (p *Pool) work(worker int, ch chan job) {
	for {
		j, ok := receive(ch)
		if !ok {
			return
		}
		for i := j.next.take(j.n); i < j.n; i = j.next.take(j.n) {
			j.task.Do(worker, i)
		}
		p.done <- struct{}{}
	}
}

// receive takes the next value from ch, polling it for spinFor (yielding
// to other goroutines in between) before blocking; ok is false once ch is
// closed.
func receive[T any](ch chan T) (v T, ok bool) {
	deadline := time.Now().Add(spinFor)
	for time.Now().Before(deadline) {
		select {
		case v, ok = <-ch:
			return v, ok
		default:
			runtime.Gosched()
		}
	}
	v, ok = <-ch
	return v, ok
}

// Run calls t.Do for every i in [0, n), spread over the workers, and returns
// when all calls have returned. Indices are handed out dynamically, so
// uneven iterations balance themselves.
func (p *Pool) Run(n int, t Task) {
	if n <= 0 {
		return
	}
	if p.threads == 1 || n == 1 {
		for i := 0; i < n; i++ {
			t.Do(0, i)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next.i = 0
	helpers := min(len(p.start), n-1)
	for w := 0; w < helpers; w++ {
		p.start[w] <- job{task: t, next: &p.next, n: n}
	}
	for i := p.next.take(n); i < n; i = p.next.take(n) {
		t.Do(0, i)
	}
	for range helpers {
		receive(p.done)
	}
}

// Close stops the workers. The pool must not be used afterwards.
func (p *Pool) Close() {
	for _, ch := range p.start {
		close(ch)
	}
	p.start = nil
}
