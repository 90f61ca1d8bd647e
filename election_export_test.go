package dlock

import (
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
)

// useElectionMutant breaks, in the worker process that calls it before it
// makes any Client, a part of the Election that a multi-process test checks,
// to show that the check catches it. It reports false if there is no such
// mutant.
func useElectionMutant(name string) bool {
	switch name {
	case "observe-messages-only":
		// Observe reads the state again on a message only: a lease that
		// runs out, which sends none, is never seen to end.
		observeAgain = func(time.Duration, protocol.LeaderState) time.Duration { return 24 * time.Hour }
		return true
	}
	return false
}
