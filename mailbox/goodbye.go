package mailbox

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
