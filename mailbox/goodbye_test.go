package mailbox

import (
	"errors"
	"testing"
)

// TestGoodbye: nothing while the peer is there; after its goodbye, nothing
// until Looks looks begun after it were reported drained, however many
// looks took something meanwhile; then its error.
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
		g.Drained() // before the goodbye: does not count
		if err := g.Err(3); err != nil {
			t.Fatalf("before the goodbye: %v", err)
		}
	}
	if g.Heard() {
		t.Fatal("heard a goodbye before the peer left")
	}
	left = true
	g.Drained() // a look that began before the goodbye was heard
	if err := g.Err(3); err != nil || !g.Heard() {
		t.Fatalf("the look that hears the goodbye: %v, heard %v; want nil, true", err, g.Heard())
	}
	for look := range 10 { // looks that took something
		if err := g.Err(3); err != nil {
			t.Fatalf("look %d after the goodbye, not drained: %v", look, err)
		}
	}
	g.Drained()
	if err := g.Err(3); err != nil {
		t.Fatalf("after one drained look of two: %v", err)
	}
	g.Drained()
	if err := g.Err(3); err != bye {
		t.Fatalf("after two drained looks: %v, want the goodbye", err)
	}
	if err := (&Goodbye{}).Err(3); err != nil {
		t.Fatalf("without Left: %v", err)
	}
}
