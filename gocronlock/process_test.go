package gocronlock_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// The schedule of the Locker tests: three instances fire the same job,
// offsets apart, every interval, for three ticks.
var (
	lockerOffsets  = []time.Duration{0, 500 * time.Millisecond, time.Second}
	lockerInterval = 3 * time.Second
)

const lockerTicks = 3

// lockerRuns runs three Locker workers with min hold d on the schedule
// above and returns how many times each tick ran. Every instance fired
// every tick: each either ran it or was refused the lock.
func lockerRuns(t *testing.T, d time.Duration) []int {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	base := time.Now().Add(2 * time.Second) // after the workers have started
	var ws []*proc
	for i, off := range lockerOffsets {
		ws = append(ws, startWorker(t, "locker", params{
			Addr: srv.Addr, Name: fmt.Sprintf("instance%d", i), Job: "report",
			MinHold: d, Base: base, Offset: off, Interval: lockerInterval, Ticks: lockerTicks,
		}, false))
	}
	for _, w := range ws {
		w.stop(t)
	}
	if t.Failed() {
		t.FailNow()
	}
	counts := make([]int, lockerTicks)
	var lines []string
	for _, r := range runs(t, rdb) {
		k := atoi(t, r[0])
		if k < 0 || k >= lockerTicks {
			t.Fatalf("a run of tick %d, by %s: only ticks 0 to %d were due", k, r[1], lockerTicks-1)
		}
		counts[k]++
		lines = append(lines, r[0]+" by "+r[1])
	}
	fired := slices.Clone(counts)
	for _, r := range list(t, rdb, refusedKey) {
		if k := atoi(t, r[0]); k >= 0 && k < lockerTicks {
			fired[k]++
		}
	}
	t.Logf("min hold %v; runs, in the order Redis got them: %s; fired per tick, run or refused: %v", d, strings.Join(lines, ", "), fired)
	for k, n := range fired {
		if n != len(lockerOffsets) {
			t.Fatalf("tick %d was fired %d times (run or refused), not once by each of the %d instances", k, n, len(lockerOffsets))
		}
	}
	return counts
}

// TestLockerOncePerTick: with a min hold of 2s, three instances firing the
// same tick up to 1s apart run each tick exactly once.
func TestLockerOncePerTick(t *testing.T) {
	t.Parallel()
	counts := lockerRuns(t, 2*time.Second)
	for k, n := range counts {
		if n != 1 {
			t.Errorf("tick %d ran %d times, not once (runs per tick: %v)", k, n, counts)
		}
	}
}

// TestLockerMinHoldTooShort: with a min hold of 0.5s, shorter than the 1s
// between the first and the last instance to fire, the check above catches
// a tick run twice: the promise needs the min hold.
func TestLockerMinHoldTooShort(t *testing.T) {
	t.Parallel()
	counts := lockerRuns(t, 500*time.Millisecond)
	if !slices.ContainsFunc(counts, func(n int) bool { return n > 1 }) {
		t.Fatalf("every tick ran at most once (runs per tick: %v) though the instances fired twice the min hold apart", counts)
	}
	for k, n := range counts {
		if n > 1 {
			t.Logf("as expected: tick %d ran %d times (runs per tick: %v)", k, n, counts)
		}
	}
}

// TestElectorFailover: of three instances with an Elector, only the leader
// runs jobs; when it is killed (SIGKILL), the runs move to one other
// instance, under a higher term, and none of the killed one's come after.
func TestElectorFailover(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const ttl = 2 * time.Second
	var ws []*proc
	for i := range 3 {
		ws = append(ws, startWorker(t, "elector", params{
			Addr: srv.Addr, Name: fmt.Sprintf("instance%d", i), Job: "failover",
			TTL: ttl, Interval: 100 * time.Millisecond,
		}, true))
	}
	// waitRuns waits until n runs are recorded by instances other than
	// skip, within bound (a bound on the wait, far above what it takes).
	waitRuns := func(n int, skip string, bound time.Duration, what string) {
		t.Helper()
		deadline := time.Now().Add(bound)
		for {
			got := 0
			for _, r := range runs(t, rdb) {
				if r[0] != skip {
					got++
				}
			}
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d runs after %v, %d wanted", what, got, bound, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitRuns(5, "", 10*time.Second, "the first leader")
	before := runs(t, rdb)
	leader, term := before[0][0], atoi(t, before[0][1])
	for i, r := range before {
		if r[0] != leader || atoi(t, r[1]) != term {
			t.Fatalf("run %d by %s in term %s: runs so far were by %s in term %d: two instances ran the job", i, r[0], r[1], leader, term)
		}
	}
	var killed *proc
	for _, w := range ws {
		if w.name == leader {
			killed = w
		}
	}
	killed.kill(t)
	atKill := len(runs(t, rdb)) // the killed leader's last run is before this
	waitRuns(5, leader, ttl+ttl/2+2*time.Second, "a new leader after the kill")
	// The next leader runs the job alone; stopped gracefully (its
	// Elector's Close resigns), it hands over to the last instance.
	next := runs(t, rdb)[atKill][0]
	atStop := len(runs(t, rdb)) // no other instance ran before this
	for _, w := range ws {
		if w.name == next {
			w.stop(t)
		}
	}
	waitRuns(atStop-atKill+5, leader, 10*time.Second, "the last leader after the resignation")
	for _, w := range ws {
		if w != killed && w.name != next {
			w.stop(t)
		}
	}
	all := runs(t, rdb)
	t.Logf("runs (instance, term), in the order Redis got them: %v; %s killed before run %d, %s stopped after run %d", all, leader, atKill, next, atStop)
	// Cut all into the runs of each leader; check each ran alone, in one
	// term higher than the last leader's.
	var terms []int64
	var leaders []string
	for i, r := range all {
		term := atoi(t, r[1])
		if len(leaders) == 0 || r[0] != leaders[len(leaders)-1] {
			if len(terms) > 0 && term <= terms[len(terms)-1] {
				t.Fatalf("run %d by %s in term %d, not above the term %d of %s before it", i, r[0], term, terms[len(terms)-1], leaders[len(leaders)-1])
			}
			leaders, terms = append(leaders, r[0]), append(terms, term)
			switch {
			case len(leaders) == 2 && i < atKill:
				t.Fatalf("run %d by %s, while %s led and lived: two instances ran the job", i, r[0], leader)
			case len(leaders) == 3 && i < atStop:
				t.Fatalf("run %d by %s, while %s led and ran: two instances ran the job", i, r[0], next)
			}
		} else if term != terms[len(terms)-1] {
			t.Fatalf("run %d by %s in term %d, after its runs in term %d", i, r[0], term, terms[len(terms)-1])
		}
	}
	if want := []string{leader, next}; len(leaders) != 3 || !slices.Equal(leaders[:2], want) || leaders[2] == leader || leaders[2] == next {
		t.Fatalf("the leaders in turn were %v: want %v then the third instance", leaders, want)
	}
}
