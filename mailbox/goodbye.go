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
// said goodbye: what it sent before is in its ring (or registered memory)
// by then but may not have been taken yet, so the wait takes Looks more
// looks first.
type Goodbye struct {
	// Left reports the peer's goodbye (the transports' Config.Left; nil:
	// never).
	Left func(rank int) error
	// Looks is how many looks a wait takes after the goodbye.
	Looks int
	taken int
}

// Err returns nil while rank has not left, or until the wait has taken
// Looks more looks since it left (each call is a look); then Left's error.
func (g *Goodbye) Err(rank int) error {
	if g.Left == nil {
		return nil
	}
	err := g.Left(rank)
	if err == nil {
		return nil
	}
	if g.taken++; g.taken <= g.Looks {
		return nil
	}
	return err
}
