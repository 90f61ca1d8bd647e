package dlock_test

// Elections among real OS processes: candidates and an observer are worker
// processes (roles "candidate" and "observer"), each with its own Client,
// driven by lines on their stdin and telling what happened in JSON lines on
// their stdout. Leaders are killed with SIGKILL and stopped with SIGSTOP.
// Each safety check also runs once against a deliberately broken variant,
// which it must catch.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// electionEvent is one line a candidate or an observer prints.
type electionEvent struct {
	Ev    string // "lead", "proclaimed", "resigned", "closed", "wrote", "state" or "error"
	Term  int64  `json:",omitempty"`
	Value string `json:",omitempty"`
	Since int64  `json:",omitempty"` // µs: the start of an observed state's term
	At    int64  `json:",omitempty"` // ns: when Campaign returned, or a state was yielded
	// Start and End: ns, when Resign or Close was called and returned.
	Start, End int64 `json:",omitempty"`
	// Of a "wrote": the leadership context's deadline (ns), whether that
	// context had ended when the write was made, whether the resource
	// accepted the write fenced by the term, and whether the leadership was
	// seen lost (ErrLockLost) within 2s after it.
	Deadline int64 `json:",omitempty"`
	Ended    bool  `json:",omitempty"`
	Accepted bool  `json:",omitempty"`
	Lost     bool  `json:",omitempty"`
	Err      string
}

// electionWorker is a candidate or an observer of the Election p.Name.
//
// An observer prints a "state" for each state Observe yields, until its
// stdin closes. A candidate reads commands, one a line: "campaign VALUE"
// (in the background; "lead" once it leads), "proclaim VALUE", "resign",
// "close" (its Client), and "write": a write to the resource fenced by its
// term, made whether or not it still leads, as by a leader that does not
// check.
func electionWorker(role string, c *dlock.Client, resRDB *redis.Client, p workerParams) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	el := c.Election(p.Name)
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	emit := func(e electionEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
	}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	if role == "observer" {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
		for l, err := range el.Observe(ctx) {
			e := electionEvent{Ev: "state", Term: l.Term, Value: l.Value, At: time.Now().UnixNano()}
			if !l.Since.IsZero() {
				e.Since = l.Since.UnixMicro()
			}
			if err != nil {
				e.Ev, e.Err = "error", err.Error()
			}
			emit(e)
		}
		return nil
	}

	var (
		ldMu sync.Mutex
		ld   *dlock.Leadership
		lctx context.Context
		wg   sync.WaitGroup
	)
	current := func() (*dlock.Leadership, context.Context) {
		ldMu.Lock()
		defer ldMu.Unlock()
		return ld, lctx
	}
	defer wg.Wait()
	defer cancel()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		l, lc := current()
		if cmd != "campaign" && cmd != "close" && l == nil {
			emit(electionEvent{Ev: "error", Err: cmd + " before leading"})
			continue
		}
		switch cmd {
		case "campaign":
			wg.Go(func() {
				l, err := el.Campaign(ctx, arg)
				at := time.Now().UnixNano()
				if err != nil {
					emit(electionEvent{Ev: "error", Err: errText(err)})
					return
				}
				lc, _ := l.Context(context.Background())
				ldMu.Lock()
				ld, lctx = l, lc
				ldMu.Unlock()
				emit(electionEvent{Ev: "lead", Term: l.Term(), Value: arg, At: at})
			})
		case "proclaim":
			emit(electionEvent{Ev: "proclaimed", Term: l.Term(), Value: arg, Err: errText(l.Proclaim(ctx, arg))})
		case "resign":
			start := time.Now().UnixNano()
			err := l.Resign(ctx)
			emit(electionEvent{Ev: "resigned", Term: l.Term(), Start: start, End: time.Now().UnixNano(), Err: errText(err)})
		case "close":
			start := time.Now().UnixNano()
			err := c.Close()
			emit(electionEvent{Ev: "closed", Start: start, End: time.Now().UnixNano(), Err: errText(err)})
		case "write":
			d, _ := lc.Deadline()
			e := electionEvent{Ev: "wrote", Term: l.Term(), Deadline: d.UnixNano(), Ended: lc.Err() != nil}
			n, err := fencedWrite.Run(ctx, resRDB, []string{"resource"}, l.Term()).Int()
			e.Accepted, e.Err = n == 1, errText(err)
			e.Lost = closedWithin(lc.Done(), 2*time.Second) && errors.Is(l.Err(), dlock.ErrLockLost)
			emit(e)
		default:
			emit(electionEvent{Ev: "error", Err: "unknown command " + cmd})
		}
	}
	return in.Err()
}

// electionProc is a candidate or observer worker process.
type electionProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan electionEvent
}

func startElectionProc(t *testing.T, name, role, mutant string, lockSrv, resSrv *redistest.Server, p workerParams) *electionProc {
	t.Helper()
	cmd := worker(t, role, mutant, lockSrv, resSrv, p)
	cmd.Stderr = &testWriter{t: t, prefix: name + ": "}
	stdin, events := startEvents(t, cmd, func(line string) electionEvent {
		return electionEvent{Ev: "error", Err: "unreadable line " + line}
	})
	return &electionProc{name: name, cmd: cmd, stdin: stdin, events: events}
}

func (ep *electionProc) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(ep.stdin, line+"\n"); err != nil {
		t.Fatalf("%s: %v", ep.name, err)
	}
}

func (ep *electionProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := ep.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// next returns the process's next event, if one comes within d.
func (ep *electionProc) next(d time.Duration) (electionEvent, bool) {
	select {
	case e, ok := <-ep.events:
		return e, ok
	case <-time.After(d):
		return electionEvent{}, false
	}
}

// expect returns the process's next event, failing the test unless it
// comes within 15s, is an ev and reports no error.
func (ep *electionProc) expect(t *testing.T, ev string) electionEvent {
	t.Helper()
	e, ok := ep.next(15 * time.Second)
	switch {
	case !ok:
		t.Fatalf("%s: no %s within 15s", ep.name, ev)
	case e.Ev != ev || e.Err != "":
		t.Fatalf("%s: %+v, want %s", ep.name, e, ev)
	}
	return e
}

// since returns the start of term, if term is the one Redis's leader record
// holds for the election name; zero otherwise.
func since(t *testing.T, rdb *redis.Client, name string, term int64) time.Time {
	t.Helper()
	l, err := clientOn(t, rdb).Election(name).Leader(context.Background())
	if err != nil || l.Term != term {
		return time.Time{}
	}
	return l.Since
}

func unixNano(ns int64) time.Time { return time.Unix(0, ns) }

// killedOutcome is what the killed-leader test checks.
type killedOutcome struct {
	ttl         time.Duration
	first, next electionEvent // the first leader's "lead", and the next one's
	killed      time.Time     // just before the first leader's SIGKILL
	nextSince   time.Time     // the next term's start, as Redis's record has it
}

func (o killedOutcome) violations() []string {
	var v []string
	if at := unixNano(o.next.At); at.Before(o.killed) {
		v = append(v, fmt.Sprintf("a second leader (term %d) while the first (term %d) lived, %v before the kill", o.next.Term, o.first.Term, o.killed.Sub(at)))
	}
	if o.next.Term <= o.first.Term {
		v = append(v, fmt.Sprintf("the next term %d is not above the killed leader's %d", o.next.Term, o.first.Term))
	}
	if o.nextSince.IsZero() {
		v = append(v, fmt.Sprintf("Redis's leader record does not hold the next term %d", o.next.Term))
	} else if limit := o.ttl + o.ttl/10; o.nextSince.Sub(o.killed) > limit {
		v = append(v, fmt.Sprintf("the next term began %v after the kill, want within TTL + TTL/10 (%v)", o.nextSince.Sub(o.killed), limit))
	}
	return v
}

// killedLeader: three candidate processes, the first leading and the
// others (which run mutant's scripts, if any) in line; the leader is killed.
func killedLeader(t *testing.T, mutant string) killedOutcome {
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	rdb := lockSrv.Client(t)
	p := workerParams{Name: "killed", TTL: 3 * time.Second}
	o := killedOutcome{ttl: p.TTL}
	a := startElectionProc(t, "a", "candidate", "", lockSrv, resSrv, p)
	a.send(t, "campaign a")
	o.first = a.expect(t, "lead")
	b := startElectionProc(t, "b", "candidate", mutant, lockSrv, resSrv, p)
	c := startElectionProc(t, "c", "candidate", mutant, lockSrv, resSrv, p)
	// In line, or (the broken variant) holding the lease in the leader's
	// stead: the lock state names one holder, so each owner other than the
	// first leader seen holding it counts.
	const lock = "dlock:election:{killed}"
	leader := holderOf(t, rdb, lock)
	if leader == "" {
		t.Fatal("the first leader holds no lease")
	}
	took := map[string]bool{}
	standing := func(n int64) func() bool {
		return func() bool {
			if s, err := readLockErr(rdb, lock); err == nil && s.Held() && s.Owner != leader {
				took[s.Owner] = true
			}
			return rdb.ZCard(context.Background(), lock+":waiters").Val()+int64(len(took)) >= n
		}
	}
	b.send(t, "campaign b")
	within(5*time.Second, standing(1))
	c.send(t, "campaign c")
	within(5*time.Second, standing(2))
	o.killed = time.Now()
	a.signal(t, syscall.SIGKILL)
	// The next leader is whoever says so first.
	select {
	case o.next = <-b.events:
	case o.next = <-c.events:
	case <-time.After(15 * time.Second):
		t.Fatal("nobody leads 15s after the leader was killed")
	}
	for _, ep := range []*electionProc{b, c} {
		if e, ok := ep.next(100 * time.Millisecond); ok && e.Ev == "lead" && e.At < o.next.At {
			o.next = e
		}
	}
	if o.next.Ev != "lead" {
		t.Fatalf("after the kill: %+v", o.next)
	}
	o.nextSince = since(t, rdb, "killed", o.next.Term)
	return o
}

// TestElectionProcessKilled: of three candidate processes, the leader is
// killed with SIGKILL; the next in line leads, with a higher term, within
// TTL + TTL/10 of the kill, and not before it. With candidates whose
// acquire ignores the holder, the checks must fail.
func TestElectionProcessKilled(t *testing.T) {
	t.Parallel()
	t.Run("dlock", func(t *testing.T) {
		o := killedLeader(t, "")
		for _, v := range o.violations() {
			t.Error(v)
		}
		t.Logf("term %d -> %d, began %v after the kill (TTL %v)", o.first.Term, o.next.Term, o.nextSince.Sub(o.killed), o.ttl)
	})
	t.Run("broken-lock-is-caught", func(t *testing.T) {
		o := killedLeader(t, "acquire-ignores-holder")
		v := o.violations()
		if len(v) == 0 {
			t.Fatalf("candidates that ignore the leader passed the checks: %+v", o)
		}
		t.Logf("caught, as it must be: %v", v)
	})
}

// stoppedOutcome is what the stopped-leader test checks.
type stoppedOutcome struct {
	first, next electionEvent // the stopped leader's "lead", and the next one's
	nextSince   time.Time     // the next term's start, as Redis's record has it
	nextWrite   electionEvent // the next leader's fenced write
	staleWrite  electionEvent // the stopped leader's, after SIGCONT
}

func (o stoppedOutcome) violations() []string {
	var v []string
	if o.next.Term <= o.first.Term {
		v = append(v, fmt.Sprintf("the next term %d is not above the stopped leader's %d", o.next.Term, o.first.Term))
	}
	deadline := unixNano(o.staleWrite.Deadline)
	switch {
	case o.nextSince.IsZero():
		v = append(v, fmt.Sprintf("Redis's leader record does not hold the next term %d", o.next.Term))
	case !deadline.Before(o.nextSince):
		v = append(v, fmt.Sprintf("the stopped leader's local deadline %v does not precede the next term's start %v",
			deadline.Format(time.StampMicro), o.nextSince.Format(time.StampMicro)))
	}
	if !o.nextWrite.Accepted {
		v = append(v, "the resource refused the next leader's write")
	}
	if o.staleWrite.Accepted {
		v = append(v, "the resource accepted the stopped leader's write after SIGCONT")
	}
	if !o.staleWrite.Lost {
		v = append(v, fmt.Sprintf("the stopped leader did not see its leadership lost: %+v", o.staleWrite))
	}
	return v
}

// stoppedLeader: three candidate processes, the first (which runs mutant's
// scripts, if any) leading; it is stopped with SIGSTOP past its TTL, and
// continued once the next leads and has written.
func stoppedLeader(t *testing.T, mutant string) stoppedOutcome {
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	rdb := lockSrv.Client(t)
	p := workerParams{Name: "stopped", TTL: time.Second}
	var o stoppedOutcome
	a := startElectionProc(t, "a", "candidate", mutant, lockSrv, resSrv, p)
	a.send(t, "campaign a")
	o.first = a.expect(t, "lead")
	b := startElectionProc(t, "b", "candidate", "", lockSrv, resSrv, p)
	c := startElectionProc(t, "c", "candidate", "", lockSrv, resSrv, p)
	b.send(t, "campaign b")
	candidatesInLine(t, rdb, "stopped", 1)
	c.send(t, "campaign c")
	candidatesInLine(t, rdb, "stopped", 2)
	a.signal(t, syscall.SIGSTOP)
	o.next = b.expect(t, "lead")
	o.nextSince = since(t, rdb, "stopped", o.next.Term)
	b.send(t, "write")
	o.nextWrite = b.expect(t, "wrote")
	a.signal(t, syscall.SIGCONT)
	a.send(t, "write")
	o.staleWrite = a.expect(t, "wrote")
	return o
}

// TestElectionProcessStopped: of three candidate processes, the leader is
// stopped with SIGSTOP past its TTL. The next in line leads, with a higher
// term; the stopped leader's local deadline, as its leadership context's
// Deadline tells it, precedes the next term's start (Redis's clock, on the
// same host); after SIGCONT the stopped leader sees its leadership lost, and
// its write fenced by its term is refused. With a leader whose acquire
// hands out a term it does not record (the next term is lower), the checks
// must fail.
func TestElectionProcessStopped(t *testing.T) {
	// Not in parallel: it stops a leader for one TTL and checks the order of
	// what follows, which a busy machine can blur.
	t.Run("dlock", func(t *testing.T) {
		o := stoppedLeader(t, "")
		for _, v := range o.violations() {
			t.Error(v)
		}
		t.Logf("term %d -> %d; the stopped leader's deadline came %v before the next term began",
			o.first.Term, o.next.Term, o.nextSince.Sub(unixNano(o.staleWrite.Deadline)))
	})
	t.Run("broken-fence-is-caught", func(t *testing.T) {
		o := stoppedLeader(t, "unrecorded-fence")
		v := o.violations()
		if len(v) == 0 {
			t.Fatalf("a leader with a term the election does not record passed the checks: %+v", o)
		}
		t.Logf("caught, as it must be: %v", v)
	})
}

// TestElectionProcessHandOver: of three candidate processes with a TTL of
// 30s, the leader resigns, and the next in line leads at once: its term
// began while the Resign ran (it was granted by the Resign itself), and its
// Campaign returned well before TTL/2. Then that leader's Client is closed,
// and the last candidate leads the same way, granted by the Close.
func TestElectionProcessHandOver(t *testing.T) {
	t.Parallel()
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	rdb := lockSrv.Client(t)
	p := workerParams{Name: "handover", TTL: 30 * time.Second}
	a := startElectionProc(t, "a", "candidate", "", lockSrv, resSrv, p)
	b := startElectionProc(t, "b", "candidate", "", lockSrv, resSrv, p)
	c := startElectionProc(t, "c", "candidate", "", lockSrv, resSrv, p)
	a.send(t, "campaign a")
	first := a.expect(t, "lead")
	b.send(t, "campaign b")
	candidatesInLine(t, rdb, "handover", 1)
	c.send(t, "campaign c")
	candidatesInLine(t, rdb, "handover", 2)

	granted := func(by electionEvent, what string, from *electionProc, prev int64) int64 {
		t.Helper()
		next := from.expect(t, "lead")
		began := since(t, rdb, "handover", next.Term)
		switch {
		case next.Term <= prev:
			t.Errorf("after %s: term %d, not above %d", what, next.Term, prev)
		case began.IsZero():
			t.Errorf("after %s: Redis's leader record does not hold term %d", what, next.Term)
		case began.Before(unixNano(by.Start).Truncate(time.Microsecond)) || began.After(unixNano(by.End)):
			t.Errorf("the term after %s began at %v, not while it ran (%v to %v): %s did not grant it",
				what, began.Format(time.StampMicro), unixNano(by.Start).Format(time.StampMicro), unixNano(by.End).Format(time.StampMicro), what)
		}
		if took := unixNano(next.At).Sub(unixNano(by.Start)); took >= p.TTL/2 {
			t.Errorf("the next Campaign returned %v after %s started, want well before the TTL (%v)", took, what, p.TTL)
		}
		return next.Term
	}
	a.send(t, "resign")
	second := granted(a.expect(t, "resigned"), "Resign", b, first.Term)
	b.send(t, "close")
	third := granted(b.expect(t, "closed"), "Close", c, second)
	c.send(t, "resign")
	c.expect(t, "resigned")
	mustHaveNoLeader(t, clientOn(t, rdb).Election("handover"))
	t.Logf("terms %d -> %d -> %d", first.Term, second, third)
}

// leaderState is an election's state as the tests compare them: its term
// and value, (0, "") when nobody leads.
type leaderState struct {
	term  int64
	value string
}

func (s leaderState) String() string {
	if s.term == 0 {
		return "nobody"
	}
	return fmt.Sprintf("%d:%s", s.term, s.value)
}

// observeOutcome is what the observer test checks.
type observeOutcome struct {
	ttl time.Duration
	// The true sequence of states of the paced run, and of the run that
	// follows it, unpaced, and what the observer saw of each.
	paced, pacedSeen []leaderState
	fast, fastSeen   []leaderState
	killed           time.Time // the last leader's SIGKILL, which ends the unpaced run
	final            time.Time // when the observer yielded nobody leading after it; zero if not
	errs             []string  // errors the observer yielded
}

func (o observeOutcome) violations() []string {
	v := o.errs
	if fmt.Sprint(o.pacedSeen) != fmt.Sprint(o.paced) {
		v = append(v, fmt.Sprintf("paced slower than the observer, it saw %v of %v", o.pacedSeen, o.paced))
	}
	if i := subsequence(o.fastSeen, o.fast); i >= 0 {
		v = append(v, fmt.Sprintf("the observer saw %v, not an in-order subsequence of %v: %v at %d", o.fastSeen, o.fast, o.fastSeen[i], i))
	}
	if o.final.IsZero() {
		v = append(v, fmt.Sprintf("the observer did not end at the final state (nobody leads) within two TTLs of the last leader's kill; it saw %v", o.fastSeen))
	} else if late := o.final.Sub(o.killed); late > 2*o.ttl+o.ttl/10 {
		v = append(v, fmt.Sprintf("the observer saw the final state %v after the last leader's kill, want within 2 TTLs (%v)", late, 2*o.ttl))
	}
	return v
}

// subsequence returns -1 if seen is an in-order subsequence of all, else the
// index in seen of the first state that breaks it.
func subsequence(seen, all []leaderState) int {
	j := 0
	for i, s := range seen {
		for j < len(all) && all[j] != s {
			j++
		}
		if j == len(all) {
			return i
		}
		j++
	}
	return -1
}

// observedElection: three candidate processes and an observer process (which
// runs mutant, if any). First a run paced slower than the observer, each
// change made once the observer has seen the one before: every state in
// order, nobody leading included. Then one as fast as the candidates go,
// ended by killing its last leader, after which nobody leads and no message
// tells it.
func observedElection(t *testing.T, mutant string) observeOutcome {
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	rdb := lockSrv.Client(t)
	p := workerParams{Name: "observed", TTL: time.Second}
	o := observeOutcome{ttl: p.TTL}
	obs := startElectionProc(t, "observer", "observer", mutant, lockSrv, resSrv, p)
	cands := map[string]*electionProc{}
	for _, n := range []string{"a", "b", "c"} {
		cands[n] = startElectionProc(t, n, "candidate", "", lockSrv, resSrv, p)
	}
	nobody := leaderState{}
	// seen reads the observer's states until want (or, if wait is 0, what is
	// there now), appending them to into.
	seen := func(into *[]leaderState, want *leaderState, wait time.Duration) {
		for {
			e, ok := obs.next(wait)
			if !ok {
				return
			}
			if e.Ev != "state" {
				o.errs = append(o.errs, fmt.Sprintf("the observer yielded %+v", e))
				continue
			}
			s := leaderState{e.Term, e.Value}
			*into = append(*into, s)
			if want != nil && s == *want {
				if s == nobody && into == &o.fastSeen {
					o.final = unixNano(e.At)
				}
				return
			}
		}
	}
	// change makes one change by cands[n]'s command, and returns the state
	// it leads to (the lead of "then", if not empty, once granted).
	change := func(n, cmd, ev, then string) leaderState {
		t.Helper()
		cands[n].send(t, cmd)
		e := cands[n].expect(t, ev)
		switch {
		case then != "":
			e = cands[then].expect(t, "lead")
			return leaderState{e.Term, e.Value}
		case ev == "lead", ev == "proclaimed":
			return leaderState{e.Term, e.Value}
		}
		return nobody
	}
	paced := func(s leaderState) {
		o.paced = append(o.paced, s)
		seen(&o.pacedSeen, &s, 10*time.Second)
	}

	paced(nobody)
	paced(change("a", "campaign a", "lead", ""))
	paced(change("a", "proclaim a2", "proclaimed", ""))
	cands["b"].send(t, "campaign b")
	candidatesInLine(t, rdb, "observed", 1)
	paced(change("a", "resign", "resigned", "b"))
	paced(change("b", "proclaim b2", "proclaimed", ""))
	paced(change("b", "resign", "resigned", ""))
	paced(change("c", "campaign c", "lead", ""))
	paced(change("c", "close", "closed", ""))

	// The candidates' Clients are closed or done: new ones.
	for _, n := range []string{"a", "b", "c"} {
		cands[n] = startElectionProc(t, n+"2", "candidate", "", lockSrv, resSrv, p)
	}
	o.fast = append(o.fast, nobody, change("a", "campaign x", "lead", ""))
	cands["b"].send(t, "campaign y")
	candidatesInLine(t, rdb, "observed", 1)
	cands["c"].send(t, "campaign z")
	candidatesInLine(t, rdb, "observed", 2)
	for i := range 5 {
		o.fast = append(o.fast, change("a", fmt.Sprintf("proclaim x%d", i), "proclaimed", ""))
	}
	o.fast = append(o.fast, change("a", "resign", "resigned", "b"))
	o.fast = append(o.fast, change("b", "proclaim y1", "proclaimed", ""))
	o.fast = append(o.fast, change("b", "resign", "resigned", "c"))
	o.fast = append(o.fast, change("c", "proclaim z1", "proclaimed", ""))
	o.killed = time.Now()
	cands["c"].signal(t, syscall.SIGKILL)
	o.fast = append(o.fast, nobody)
	seen(&o.fastSeen, &nobody, 2*o.ttl+o.ttl/10)
	return o
}

// TestElectionProcessObserve: an observer process follows an election among
// three candidate processes. Paced slower than the observer, it sees every
// state, in order, nobody leading included; unpaced, what it sees is an
// in-order subsequence of the true states that ends, within two TTLs of
// the last leader's kill (its lease runs out within one, and no message
// tells of that), at the final state: nobody leads. With an observer that
// waits for messages alone, the checks must fail.
func TestElectionProcessObserve(t *testing.T) {
	t.Parallel()
	t.Run("dlock", func(t *testing.T) {
		o := observedElection(t, "")
		for _, v := range o.violations() {
			t.Error(v)
		}
		t.Logf("paced: saw %v; unpaced: saw %v of %v, the final state %v after the kill", o.pacedSeen, o.fastSeen, o.fast, o.final.Sub(o.killed))
	})
	t.Run("broken-observer-is-caught", func(t *testing.T) {
		o := observedElection(t, "observe-messages-only")
		v := o.violations()
		if len(v) == 0 {
			t.Fatalf("an observer that waits for messages alone passed the checks: %+v", o)
		}
		t.Logf("caught, as it must be: %v", v)
	})
}
