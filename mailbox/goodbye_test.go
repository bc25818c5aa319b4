package mailbox

import (
	"errors"
	"testing"
)

// TestGoodbye: nothing while the peer is there; after its goodbye, Looks
// more looks, then its error.
func TestGoodbye(t *testing.T) {
	bye := errors.New("rank 3 closed its group")
	left := false
	g := Goodbye{Left: func(rank int) error {
		if left && rank == 3 {
			return bye
		}
		return nil
	}, Looks: 2}
	for range 5 {
		if err := g.Err(3); err != nil {
			t.Fatalf("before the goodbye: %v", err)
		}
	}
	left = true
	for look := 1; look <= 2; look++ {
		if err := g.Err(3); err != nil {
			t.Fatalf("look %d after the goodbye: %v, want a last look", look, err)
		}
	}
	if err := g.Err(3); err != bye {
		t.Fatalf("after the last looks: %v", err)
	}
	if err := (&Goodbye{}).Err(3); err != nil {
		t.Fatalf("without Left: %v", err)
	}
}
