package gocronlock_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/gocronlock"
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
// above and returns how many times each tick ran.
func lockerRuns(t *testing.T, d time.Duration) []int {
	return runLockers(t, params{
		Schedule: startAt, MinHold: d, Interval: lockerInterval, Ticks: lockerTicks,
	}, lockerOffsets).counts
}

// lockerResult is what the Locker workers of runLockers did.
type lockerResult struct {
	counts  []int                       // by tick: runs
	refused map[string]int              // by instance: ticks it was refused the lock of
	logs    map[string][]map[string]any // by instance: its Locker's log records
}

// runLockers runs a Locker worker with p (its Base, Name, Job, Addr and
// LogFile set here) for each offset, and returns what they did. Every
// instance fired every tick: each either ran it or was refused the lock.
// Runs and refusals before tick 0 (of a schedule that fires before its
// first tick) are left out.
func runLockers(t *testing.T, p params, offsets []time.Duration) lockerResult {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	dir := t.TempDir()
	// After the workers have started, a multiple of the interval (the
	// aligned and cron schedules fire on those).
	p.Base = time.Now().Add(2*time.Second + p.Interval).Truncate(p.Interval)
	p.Addr, p.Job = srv.Addr, "report"
	var ws []*proc
	for i, off := range offsets {
		q := p
		q.Name, q.Offset = fmt.Sprintf("instance%d", i), off
		q.LogFile = filepath.Join(dir, q.Name+".log")
		ws = append(ws, startWorker(t, "locker", q, false))
	}
	for _, w := range ws {
		w.stop(t)
	}
	if t.Failed() {
		t.FailNow()
	}
	r := lockerResult{counts: make([]int, p.Ticks), refused: make(map[string]int), logs: make(map[string][]map[string]any)}
	var lines []string
	for _, run := range runs(t, rdb) {
		k := atoi(t, run[0])
		if k < 0 {
			continue
		}
		if k >= int64(p.Ticks) {
			t.Fatalf("a run of tick %d, by %s: only ticks 0 to %d were due", k, run[1], p.Ticks-1)
		}
		r.counts[k]++
		lines = append(lines, run[0]+" by "+run[1])
	}
	fired := slices.Clone(r.counts)
	for _, ref := range list(t, rdb, refusedKey) {
		if k := atoi(t, ref[0]); k >= 0 && k < int64(p.Ticks) {
			fired[k]++
			r.refused[ref[1]]++
		}
	}
	for i := range offsets {
		name := fmt.Sprintf("instance%d", i)
		b, err := os.ReadFile(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%s's log: %q: %v", name, line, err)
			}
			r.logs[name] = append(r.logs[name], rec)
		}
	}
	hold := p.MinHold.String()
	if p.DefaultHold {
		hold = "the default, " + gocronlock.DefaultMinHold.String()
	}
	t.Logf("schedule %s, min hold %s; runs, in the order Redis got them: %s; fired per tick, run or refused: %v; refused per instance: %v",
		p.Schedule, hold, strings.Join(lines, ", "), fired, r.refused)
	for k, n := range fired {
		if n != len(offsets) {
			t.Fatalf("tick %d was fired %d times (run or refused), not once by each of the %d instances", k, n, len(offsets))
		}
	}
	return r
}

func sum(counts []int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
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

// scheduleOffsets are when the schedulers of the tests below start, each
// an interval before its offset: phases far enough apart that a
// DurationJob started with its scheduler runs ticks twice under a min hold
// of 0.5s (a run at phase 0 holds the lock past 0.35, not to 0.7).
var scheduleOffsets = []time.Duration{0, 350 * time.Millisecond, 700 * time.Millisecond}

// TestLockerSchedules: three instances whose schedulers started 0.35s
// apart, each firing a job every second through a Locker with a min hold of
// 0.5s. A CronJob, and a DurationJob started with AlignedStart, fire each
// tick at the same instant in every instance: each second runs once. A
// DurationJob started with its scheduler fires at each instance's own
// phase, up to 0.7s apart, longer than the min hold: some seconds run
// twice.
func TestLockerSchedules(t *testing.T) {
	redistest.Full(t, "three worker processes for 5s per case")
	t.Parallel()
	for _, tc := range []struct {
		schedule string
		once     bool // each second runs once
	}{
		{cron, true},
		{aligned, true},
		{started, false},
	} {
		t.Run(tc.schedule, func(t *testing.T) {
			t.Parallel()
			const ticks = 5
			r := runLockers(t, params{Schedule: tc.schedule, MinHold: 500 * time.Millisecond, Interval: time.Second, Ticks: ticks}, scheduleOffsets)
			runs := sum(r.counts)
			twice := slices.ContainsFunc(r.counts, func(n int) bool { return n > 1 })
			switch {
			case tc.once && twice:
				t.Errorf("a second ran more than once (runs per second: %v)", r.counts)
			case tc.once && runs < ticks/2:
				t.Errorf("%d runs in %d seconds (runs per second: %v): the Locker refused most of them", runs, ticks, r.counts)
			case !tc.once && !twice:
				t.Errorf("every second ran at most once (runs per second: %v), though the instances fired each tick up to 0.7s apart under a min hold of 0.5s", r.counts)
			}
		})
	}
}

// TestLockerMinHoldWarning: a CronJob every second under the default min
// hold of 5s runs at most twice in 6 seconds (its lock is kept 5s after
// each run starts), and each instance's Locker logs one warning, at its
// first skip within the min hold, naming the min hold and what to check,
// though it skipped more than once.
func TestLockerMinHoldWarning(t *testing.T) {
	redistest.Full(t, "three worker processes for 6s and the 5s min hold")
	t.Parallel()
	const ticks = 6
	r := runLockers(t, params{Schedule: cron, DefaultHold: true, Interval: time.Second, Ticks: ticks}, scheduleOffsets)
	if runs := sum(r.counts); runs > 2 {
		t.Errorf("%d runs in %d seconds (runs per second: %v), under a min hold of 5s", runs, ticks, r.counts)
	}
	for i := range scheduleOffsets {
		name := fmt.Sprintf("instance%d", i)
		if r.refused[name] < 2 {
			t.Errorf("%s was refused %d times: too few to tell one warning from one per refusal", name, r.refused[name])
		}
		var warnings []map[string]any
		for _, rec := range r.logs[name] {
			if rec["level"] == "WARN" {
				warnings = append(warnings, rec)
			}
		}
		if len(warnings) != 1 {
			t.Errorf("%s logged %d warnings in %d refusals, want 1: %v", name, len(warnings), r.refused[name], warnings)
			continue
		}
		w := warnings[0]
		msg, _ := w["msg"].(string)
		if w["job"] != "report" || w["min_hold"] != gocronlock.DefaultMinHold.String() ||
			!strings.Contains(msg, "interval") || !strings.Contains(msg, "alignment") ||
			!strings.Contains(fmt.Sprint(w["alignment"]), "CronJob") {
			t.Errorf("%s's warning does not name the job, the min hold (%v), the interval and the alignment: %v", name, gocronlock.DefaultMinHold, w)
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
