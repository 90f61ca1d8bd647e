package redistest

import "testing"

// TestClaim: a port is given once per process, and a pair is claimed whole
// or not at all, so that a killed server's port is still its own when it
// comes back.
func TestClaim(t *testing.T) {
	t.Parallel()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	if claim(p) {
		t.Fatalf("port %d claimed twice", p)
	}
	const q = 1 // never offered by the pickers
	if claim(q, p) {
		t.Fatalf("the pair %d, %d claimed though %d was taken", q, p, p)
	}
	if !claim(q) {
		t.Fatalf("port %d stayed claimed by a pair that was refused", q)
	}
}
