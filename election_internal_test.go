package dlock

import (
	"testing"

	"github.com/dlock-go/dlock/internal/protocol"
)

// TestObserverOrder: of the states an Observe call reads, it yields the
// first, and then only those that come after the last one it yielded: a
// term's later value, a higher term, nobody leading once a term it saw has
// ended; never a lower term, a term's earlier value, a term it saw end (a
// replica that missed writes, promoted, may show any of these), nor a state
// twice.
func TestObserverOrder(t *testing.T) {
	leader := func(term, seq int64) protocol.LeaderState { return protocol.LeaderState{Term: term, Seq: seq} }
	none := protocol.LeaderState{}
	steps := []struct {
		st    protocol.LeaderState
		yield bool
	}{
		{leader(5, 0), true},  // the first state read
		{leader(5, 0), false}, // the same
		{leader(5, 2), true},  // a Proclaim
		{leader(5, 1), false}, // an earlier Proclaim
		{leader(4, 7), false}, // an earlier term
		{none, true},          // term 5 ended
		{none, false},         // the same
		{leader(5, 2), false}, // term 5 again, which ended
		{leader(7, 0), true},  // a later term
		{leader(6, 3), false},
		{none, true},
		{leader(8, 0), true},
	}
	var o observer
	for i, s := range steps {
		if got := o.take(s.st); got != s.yield {
			t.Errorf("step %d, %+v: yielded %v, want %v", i, s.st, got, s.yield)
		}
	}
	var first observer
	if !first.take(none) {
		t.Error("nobody leading, read first, was not yielded")
	}
}
