package mailbox

import "fmt"

// LeftError says that a peer closed its group on purpose (its program
// closed it) while this rank still expected data from it: the ranks
// disagree about how many calls the job makes. Farewell is what the peer
// said about where it was ("after its call #13 (AllReduce, 103 ×
// float64)"). TCP hears it in the peer's goodbye frame, shared memory in
// the peer's segment.
type LeftError struct {
	Rank     int
	Farewell string
}

func (e *LeftError) Error() string {
	if e.Farewell == "" {
		return fmt.Sprintf("rank %d closed its group", e.Rank)
	}
	return fmt.Sprintf("rank %d closed its group %s", e.Rank, e.Farewell)
}

// Goodbye decides when a wait for a peer's frames gives up after the peer
// said goodbye. What the peer sent before is in its ring (or registered
// memory) by then but may not have been taken yet, and one look takes
// what it finds at most: so hearing the goodbye is not enough. The wait
// gives up once Looks of its looks that began after it heard the goodbye
// found nothing of the peer's left to take, as the wait reports with
// Drained (a look that took something, or found the ring held by another
// goroutine, does not count).
type Goodbye struct {
	// Left reports the peer's goodbye (the transports' Config.Left; nil:
	// never).
	Left func(rank int) error
	// Looks is how many drained looks a wait takes after the goodbye.
	Looks   int
	heard   error // Left's error, once heard
	drained int   // looks reported drained since
}

// Err returns nil while rank has not left, and from the goodbye on until
// Looks looks since have been reported drained; then Left's error. A wait
// calls it once per look, after the look.
func (g *Goodbye) Err(rank int) error {
	if g.heard == nil {
		if g.Left != nil {
			g.heard = g.Left(rank)
		}
		return nil
	}
	if g.drained < g.Looks {
		return nil
	}
	return g.heard
}

// Heard reports whether Err heard the peer's goodbye: from then on each
// look must examine all the peer may have sent, even where a wait would
// otherwise skip the look, so that it can report Drained.
func (g *Goodbye) Heard() bool { return g.heard != nil }

// Drained reports a look that found nothing of the peer's left to take
// (or, for a send, found that it still could not go on). It counts only
// when Err had heard the goodbye before the look began.
func (g *Goodbye) Drained() {
	if g.heard != nil {
		g.drained++
	}
}
