package dlock_test

// The chaos run's history and the first of its invariants, checked from it.
// The run itself is behind the chaos build tag (chaos_test.go); this file
// has none, so that the ordinary suite tests the checker without Redis
// (chaos_history_test.go) and the worker (chaos_worker_test.go, which
// worker_test.go's runWorker calls) can record what it checks.

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// The kinds of hold a section records.
const (
	holdWrite   = "write"   // a Mutex's, a FairMutex's, or an RWMutex's write hold
	holdRead    = "read"    // an RWMutex's read hold
	holdPermits = "permits" // a Semaphore's permits
	holdLeader  = "leader"  // an Election's leadership
)

// What a section's release (Unlock, Release, Resign) returned.
const (
	releasedNil     = "nil"
	releasedLost    = "lost"     // an error matching ErrLockLost
	releasedNotHeld = "not held" // one matching ErrNotHeld and not ErrLockLost
	releasedOther   = "other"    // any other error (Redis unreachable, say)
)

// releaseOutcome classifies what a release returned.
func releaseOutcome(err error) string {
	switch {
	case err == nil:
		return releasedNil
	case errors.Is(err, dlock.ErrLockLost):
		return releasedLost
	case errors.Is(err, dlock.ErrNotHeld):
		return releasedNotHeld
	}
	return releasedOther
}

// section is one hold a chaos worker had, as it saw it: from right after its
// acquire (Lock, RLock, Acquire, Campaign) returned to right before its
// release (Unlock, Release, Resign) was called, in wall-clock nanoseconds
// (time.Now().UnixNano()), which the processes of one machine share. The
// JSON names are short: a run records tens of thousands.
type section struct {
	Kind    dlock.Kind `json:"k"` // the kind of lock
	Name    string     `json:"n"` // its name
	Hold    string     `json:"h"` // holdWrite, holdRead, holdPermits or holdLeader
	Permits int64      `json:"p,omitempty"`
	Total   int64      `json:"t,omitempty"` // a Semaphore's total
	Fence   int64      `json:"f"`           // an Election's term
	Begin   int64      `json:"b"`
	End     int64      `json:"e"`
	Release string     `json:"r"` // releasedNil, releasedLost, ...
	Err     string     `json:"err,omitempty"`
	Pid     int        `json:"pid"`
	G       int        `json:"g"` // the goroutine of the worker
}

func (s section) String() string {
	what := s.Hold + " hold"
	if s.Hold == holdPermits {
		what = fmt.Sprintf("%d of %d permits", s.Permits, s.Total)
	}
	rel := s.Release
	if s.Err != "" {
		rel += " (" + s.Err + ")"
	}
	return fmt.Sprintf("%s of %s %q with fence %d by pid %d goroutine %d from %s to %s (%v), release returned %s",
		what, s.Kind, s.Name, s.Fence, s.Pid, s.G, stamp(s.Begin), stamp(s.End), time.Duration(s.End-s.Begin), rel)
}

// stamp shows a time of a section to the microsecond.
func stamp(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000000") }

// overlapViolation is a breach of the first invariant: Redis granted Later
// while the holds in Earlier had been granted and not yet released by their
// owners, so at least one of them had lost its hold before; yet not enough of
// them were told so (every one in Earlier returned nil from its release).
type overlapViolation struct {
	Later   section
	Earlier []section
	// For a Semaphore: the permits of Later and of the holds granted before
	// it that were open with it, InUse, beyond the Total.
	InUse, Total int64
}

func (v overlapViolation) String() string {
	var b strings.Builder
	if v.Later.Hold == holdPermits {
		fmt.Fprintf(&b, "%d permits of %d held at once: ", v.InUse, v.Total)
	}
	fmt.Fprintf(&b, "%s was granted while ", v.Later)
	for i, s := range v.Earlier {
		if i > 0 {
			b.WriteString("; and ")
		}
		b.WriteString(s.String())
	}
	if len(v.Earlier) == 1 {
		b.WriteString(": the earlier hold had been lost, and its release said nil")
	} else {
		b.WriteString(": some of the earlier holds had been lost, and too few of their releases said so")
	}
	return b.String()
}

// checkOverlaps returns every breach of the first invariant in a history.
//
// The invariant. A section s runs from s.Begin, after its acquire returned
// (so after Redis granted the hold, at some g(s) < s.Begin), to s.End, before
// its release was called (so before Redis ran the release, at some r(s) >
// s.End). Two sections x and y of one lock overlap when the later Begin is
// before the earlier End (max Begin < min End). Sections that only touch
// (x.End == y.Begin) do not, nor does an empty one: two clocks' readings
// that are equal say nothing of which came first. Fences rise with the
// order of grants, across holders, restarts and failovers (DECISIONS §2), so
// of x and y the one with the lower fence, say x, was granted first: g(x) <
// g(y) < y.Begin < x.End < r(x). When Redis granted y, x was granted and not
// released by its owner. If x and y cannot both be held (Mutex, FairMutex,
// Election: any two; RWMutex: a write hold and any other), x had lost its
// hold before g(y), before its release was called: its Unlock (Resign) must
// not return nil (DECISIONS §4: a hold lost meanwhile returns ErrLockLost).
// A breach: x's release returned nil.
//
// A Semaphore of N permits takes a sweep: at every section's Begin t, the
// open sections (Begin <= t < End), in the order of their fences, are
// granted one by one; when the k-th, m, is granted, the k-1 before it are
// granted and not released (their End is after t, after m's Begin). So
// whatever of their permits was not lost, and m's own, fit in N: the earlier
// ones whose release did not return nil hold at least (permits of the k) - N
// permits. A breach: they hold fewer. Which of them lost is not known (a
// restart loses them all; a paused holder only its own), so a breach blames
// them together, not the earliest alone, and is certain: no history of
// correct releases makes one. For exclusive kinds this is the rule above with
// N = 1. Checking at Begins suffices: a set of sections that overlap pairwise
// are all open at the latest Begin among them, and the k first of those open
// at t, in fence order, are a superset of any smaller set's constraint.
//
// A breach is reported once per Later: the section whose grant found no room.
func checkOverlaps(history []section) []overlapViolation {
	type lockID struct {
		kind dlock.Kind
		name string
	}
	locks := make(map[lockID][]section)
	var order []lockID
	for _, s := range history {
		id := lockID{s.Kind, s.Name}
		if _, ok := locks[id]; !ok {
			order = append(order, id)
		}
		locks[id] = append(locks[id], s)
	}
	var out []overlapViolation
	for _, id := range order {
		ss := locks[id]
		slices.SortStableFunc(ss, func(a, b section) int { return cmp.Compare(a.Begin, b.Begin) })
		if id.kind == dlock.KindSemaphore {
			out = append(out, sweepPermits(ss)...)
		} else {
			out = append(out, pairsOverlapping(ss)...)
		}
	}
	return out
}

// grantedBefore reports whether a was granted before b: a lower fence; for
// equal fences (which Redis should never hand out twice) the earlier Begin.
func grantedBefore(a, b section) bool {
	if a.Fence != b.Fence {
		return a.Fence < b.Fence
	}
	return a.Begin < b.Begin
}

// conflicting reports whether holds a and b of one lock may not both be held.
func conflicting(a, b section) bool {
	if a.Kind == dlock.KindRWMutex {
		return a.Hold == holdWrite || b.Hold == holdWrite
	}
	return true
}

// pairsOverlapping checks the sections of one lock that is not a Semaphore,
// sorted by Begin.
func pairsOverlapping(ss []section) []overlapViolation {
	blamed := make(map[int][]int) // Later's index: the Earlier's
	for i, x := range ss {
		for j := i + 1; j < len(ss) && ss[j].Begin < x.End; j++ {
			y := ss[j]
			if y.End <= y.Begin || !conflicting(x, y) { // x.Begin <= y.Begin < x.End: they overlap unless y is empty
				continue
			}
			first, later := i, j
			if grantedBefore(y, x) {
				first, later = j, i
			}
			if ss[first].Release == releasedNil {
				blamed[later] = append(blamed[later], first)
			}
		}
	}
	var out []overlapViolation
	for _, later := range slices.Sorted(maps.Keys(blamed)) {
		v := overlapViolation{Later: ss[later]}
		for _, e := range blamed[later] {
			v.Earlier = append(v.Earlier, ss[e])
		}
		slices.SortFunc(v.Earlier, func(a, b section) int { return cmp.Compare(a.Fence, b.Fence) })
		out = append(out, v)
	}
	return out
}

// sweepPermits checks the sections of one Semaphore, sorted by Begin.
func sweepPermits(ss []section) []overlapViolation {
	var out []overlapViolation
	reported := make(map[int]bool)
	var open []int // indexes of the sections open at t
	for j, s := range ss {
		t := s.Begin
		open = slices.DeleteFunc(open, func(i int) bool { return ss[i].End <= t })
		if s.End > t {
			open = append(open, j)
		}
		byGrant := slices.Clone(open)
		slices.SortFunc(byGrant, func(a, b int) int {
			if grantedBefore(ss[a], ss[b]) {
				return -1
			}
			return 1
		})
		var inUse, told int64 // permits of the first k; of those before the k-th whose release did not return nil
		for k, m := range byGrant {
			x := ss[m]
			inUse += x.Permits
			if total := x.Total; total > 0 && inUse-total > told && !reported[m] {
				reported[m] = true
				v := overlapViolation{Later: x, InUse: inUse, Total: total}
				for _, e := range byGrant[:k] {
					if ss[e].Release == releasedNil {
						v.Earlier = append(v.Earlier, ss[e])
					}
				}
				out = append(out, v)
			}
			if x.Release != releasedNil {
				told += x.Permits
			}
		}
	}
	return out
}

// overlapsByHold counts violations by the kind of hold granted last.
func overlapsByHold(vs []overlapViolation) map[string]int {
	n := make(map[string]int)
	for _, v := range vs {
		n[v.Later.Hold]++
	}
	return n
}
