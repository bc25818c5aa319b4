package mailbox

// FIFO is a first-in, first-out queue whose array is reused: in steady
// state pushing and popping allocate nothing and cost the same however
// many items wait. (A slice popped by shifting its items down costs a
// copy of the whole queue per pop: with a peer thousands of 8-byte frames
// ahead over TCP, that copy took 31% of a two-rank profile's samples.)
// The zero value is an empty queue. A FIFO is not safe for concurrent
// use.
type FIFO[T any] struct {
	items []T // items[head:] wait, oldest first
	head  int
}

// Len returns how many items wait.
func (q *FIFO[T]) Len() int { return len(q.items) - q.head }

// Push adds v at the back.
func (q *FIFO[T]) Push(v T) {
	if q.head > 0 && len(q.items) == cap(q.items) && q.head >= len(q.items)/2 {
		// Half the array or more is popped: move the waiting items down
		// instead of growing it. Each item moves at most once per time
		// the queue's length doubles, so pushes stay O(1) amortised.
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, v)
}

// Back returns the newest item; the queue must not be empty.
func (q *FIFO[T]) Back() T { return q.items[len(q.items)-1] }

// Pop removes and returns the oldest item; the queue must not be empty.
func (q *FIFO[T]) Pop() T {
	var zero T
	v := q.items[q.head]
	q.items[q.head] = zero // let the collector have what it held
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return v
}
