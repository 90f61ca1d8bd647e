package main

// Elections beside etcd: how long the next candidate waits for the lead
// when the leader resigns, and when the leader's process is killed.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// electionTTL is the lease of every election in the section: dlock's
// WithTTL and etcd's session TTL (whole seconds).
const electionTTL = 2 * time.Second

// electionCandidates is how many candidate processes the kill rounds keep.
const electionCandidates = 3

// lineSettle is how long a round waits after the server shows a candidate
// in line before its leader resigns or is killed. A candidate of etcd's
// Election watches the key ahead of it from a revision it has read, and
// etcd delivers the events of such a watcher every 100 ms until it has
// caught up; a leader that goes within 100 ms of a candidate's arrival
// would time that, not the hand-over.
const lineSettle = 250 * time.Millisecond

// candidate is one candidate of an election, with a connection of its own.
type candidate interface {
	// campaign waits until the candidate leads and returns its term (dlock)
	// or the revision that created its key (etcd).
	campaign(ctx context.Context, value string) (int64, error)
	resign(ctx context.Context) error
	close()
}

// electionSystem is one of the section's rows: an election service and its
// setting.
type electionSystem struct {
	system, setting string // "dlock", "redis"; "etcd", "fsync" | "no-fsync"
	addr            string // the redis-server's host:port, or etcd's endpoint
}

// newCandidate opens a candidate of election name.
func (s electionSystem) newCandidate(name string) (candidate, error) {
	switch s.system {
	case "dlock":
		rdb := redis.NewClient(&redis.Options{Addr: s.addr})
		c, err := dlock.New(rdb)
		if err != nil {
			_ = rdb.Close()
			return nil, err
		}
		return &dlockCandidate{rdb: rdb, c: c, el: c.Election(name, dlock.WithTTL(electionTTL))}, nil
	case "etcd":
		cli, err := newEtcdClient(s.addr, nil)
		if err != nil {
			return nil, err
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(int(electionTTL/time.Second)))
		if err != nil {
			_ = cli.Close()
			return nil, err
		}
		return &etcdCandidate{cli: cli, s: sess, e: concurrency.NewElection(sess, etcdElectionPrefix+name)}, nil
	}
	return nil, fmt.Errorf("no election system %q", s.system)
}

const etcdElectionPrefix = "/dlock-bench/election/"

// waiting returns a function that tells how many candidates of election
// name are in line behind its leader, read from the server; close releases
// what it holds.
func (s electionSystem) waiting(name string) (count func(context.Context) (int, error), close func(), err error) {
	switch s.system {
	case "dlock":
		rdb := redis.NewClient(&redis.Options{Addr: s.addr})
		c, err := dlock.New(rdb)
		if err != nil {
			_ = rdb.Close()
			return nil, nil, err
		}
		return func(ctx context.Context) (int, error) {
				st, err := c.Inspect(ctx, dlock.KindElection, name)
				if err != nil {
					return 0, err
				}
				return len(st.Waiters), nil
			}, func() {
				_ = c.Close()
				_ = rdb.Close()
			}, nil
	case "etcd":
		cli, err := newEtcdClient(s.addr, nil)
		if err != nil {
			return nil, nil, err
		}
		// A candidate's key is the prefix, '/' and its lease; the leader's
		// is the one created first.
		return func(ctx context.Context) (int, error) {
			resp, err := cli.Get(ctx, etcdElectionPrefix+name+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return max(int(resp.Count)-1, 0), nil
		}, func() { _ = cli.Close() }, nil
	}
	return nil, nil, fmt.Errorf("no election system %q", s.system)
}

// label names the row: "dlock/redis", "etcd/fsync", "etcd/no-fsync".
func (s electionSystem) label() string { return s.system + "/" + s.setting }

type dlockCandidate struct {
	rdb *redis.Client
	c   *dlock.Client
	el  *dlock.Election
	ld  *dlock.Leadership
}

func (d *dlockCandidate) campaign(ctx context.Context, value string) (int64, error) {
	ld, err := d.el.Campaign(ctx, value)
	if err != nil {
		return 0, err
	}
	d.ld = ld
	return ld.Term(), nil
}

func (d *dlockCandidate) resign(ctx context.Context) error { return d.ld.Resign(ctx) }

func (d *dlockCandidate) close() { _ = d.c.Close(); _ = d.rdb.Close() }

type etcdCandidate struct {
	cli *clientv3.Client
	s   *concurrency.Session
	e   *concurrency.Election
}

func (e *etcdCandidate) campaign(ctx context.Context, value string) (int64, error) {
	if err := e.e.Campaign(ctx, value); err != nil {
		return 0, err
	}
	return e.e.Rev(), nil
}

func (e *etcdCandidate) resign(ctx context.Context) error { return e.e.Resign(ctx) }

func (e *etcdCandidate) close() { _ = e.s.Close(); _ = e.cli.Close() }

// electionRow is one row of the election table: one system and setting,
// one way the leader goes.
type electionRow struct {
	System  string `json:"system"`  // dlock | etcd
	Setting string `json:"setting"` // redis (no persistence) | fsync | no-fsync
	// How: "resign" (the leader resigns; the next candidate's Campaign
	// returns) or "kill" (the leader's process is killed with SIGKILL; the
	// next candidate, another process, leads).
	How        string    `json:"how"`
	Rounds     int       `json:"rounds"`
	TTLms      float64   `json:"ttl_ms"`
	MedianMs   float64   `json:"median_ms"`
	MinMs      float64   `json:"min_ms"`
	MaxMs      float64   `json:"max_ms"`
	MedianTTLs float64   `json:"median_ttls"`
	Ms         []float64 `json:"ms"` // every round's
}

func newElectionRow(s electionSystem, how string, ds []time.Duration) electionRow {
	r := electionRow{System: s.system, Setting: s.setting, How: how, Rounds: len(ds), TTLms: ms(electionTTL)}
	for _, d := range ds {
		r.Ms = append(r.Ms, ms(d))
	}
	if len(r.Ms) > 0 {
		r.MedianMs, r.MinMs, r.MaxMs = median(r.Ms), minOf(r.Ms), maxOf(r.Ms)
		r.MedianTTLs = r.MedianMs / r.TTLms
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// waitInLine polls until count reports n candidates in line, for at most
// 10 s.
func waitInLine(count func(context.Context) (int, error), n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := count(ctx)
		cancel()
		if err == nil && got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("waiting for %d candidates in line: %w", n, err)
			}
			return fmt.Errorf("waiting for %d candidates in line: %d after 10 s", n, got)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// resignRounds measures, rounds times, from the moment the leader calls
// Resign to the moment the Campaign of the candidate in line behind it
// returns, lineSettle after the server showed that candidate in line. Two
// candidates of the process, each with its own connection, take turns: the
// one that resigned campaigns again.
func resignRounds(s electionSystem, rounds int) ([]time.Duration, error) {
	name := fmt.Sprintf("resign-%s-%d", s.setting, time.Now().UnixNano())
	count, closeCount, err := s.waiting(name)
	if err != nil {
		return nil, err
	}
	defer closeCount()
	var cs [2]candidate
	for i := range cs {
		if cs[i], err = s.newCandidate(name); err != nil {
			return nil, err
		}
		defer cs[i].close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds+5)*10*electionTTL)
	defer cancel()
	last, err := cs[0].campaign(ctx, "c0")
	if err != nil {
		return nil, fmt.Errorf("first campaign: %w", err)
	}
	type won struct {
		at   time.Time
		term int64
		err  error
	}
	var ds []time.Duration
	leader := 0
	for round := range rounds {
		next := 1 - leader
		got := make(chan won, 1)
		go func() {
			term, err := cs[next].campaign(ctx, "c"+strconv.Itoa(next))
			got <- won{time.Now(), term, err}
		}()
		if err := waitInLine(count, 1); err != nil {
			return nil, err
		}
		time.Sleep(lineSettle)
		t0 := time.Now()
		if err := cs[leader].resign(ctx); err != nil {
			return nil, fmt.Errorf("round %d: resign: %w", round+1, err)
		}
		var w won
		select {
		case w = <-got:
		case <-time.After(5 * electionTTL):
			return nil, fmt.Errorf("round %d: no Campaign returned within %v of the Resign", round+1, 5*electionTTL)
		}
		if w.err != nil {
			return nil, fmt.Errorf("round %d: campaign: %w", round+1, w.err)
		}
		if w.term <= last {
			return nil, fmt.Errorf("round %d: the new term %d is not above the last %d", round+1, w.term, last)
		}
		last = w.term
		ds = append(ds, w.at.Sub(t0))
		leader = next
	}
	_ = cs[leader].resign(ctx)
	return ds, nil
}

// ---- kill rounds: candidates in processes of their own ----

// workerEnv, when set, makes the bench binary a worker: "election" is a
// candidate process of the kill rounds, "singleflight" a process of callers
// of the singleflight section.
const workerEnv = "DLOCK_BENCH_WORKER"

// runWorker runs the worker role and returns the exit status.
func runWorker(role string, args []string) int {
	if role == "singleflight" {
		fs := flag.NewFlagSet("singleflight worker", flag.ContinueOnError)
		system := fs.String("system", "", "dlock or poll")
		addr := fs.String("addr", "", "redis-server host:port")
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if err := sfWorker(*system, *addr); err != nil {
			fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			return 1
		}
		return 0
	}
	if role != "election" {
		fmt.Fprintf(os.Stderr, "bench worker: no role %q\n", role)
		return 2
	}
	fs := flag.NewFlagSet("election worker", flag.ContinueOnError)
	system := fs.String("system", "", "dlock or etcd")
	addr := fs.String("addr", "", "redis-server host:port or etcd endpoint")
	name := fs.String("name", "", "election name")
	value := fs.String("value", "", "the candidate's value")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := electionWorker(electionSystem{system: *system, addr: *addr}, *name, *value); err != nil {
		fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	return 0
}

// electionWorker campaigns, prints "lead AT TERM" (AT: the wall clock in
// ns when Campaign returned) and leads until it is killed or its stdin
// closes (the bench is done with it, or gone).
func electionWorker(s electionSystem, name, value string) error {
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	c, err := s.newCandidate(name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-stdinClosed; cancel() }()
	term, err := c.campaign(ctx, value)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Printf("lead %d %d\n", time.Now().UnixNano(), term)
	<-stdinClosed
	return nil
}

// electionProc is a candidate process of the kill rounds.
type electionProc struct {
	value string
	cmd   *exec.Cmd
	stdin io.Closer
	done  chan struct{} // closed once the process has exited and been waited for
	mu    sync.Mutex
	tail  []string // its last lines of stderr
}

// procEvent is a line a candidate process printed ("lead", "error") or
// "exit" when it ended.
type procEvent struct {
	p    *electionProc
	what string
	at   time.Time
	term int64
	msg  string
}

// startProc starts a candidate process of election name, sending its
// events to events.
func startProc(s electionSystem, name, value string, events chan<- procEvent, stops *stopper) (*electionProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &electionProc{value: value, done: make(chan struct{})}
	p.cmd = exec.Command(exe, "-system", s.system, "-addr", s.addr, "-name", name, "-value", value)
	p.cmd.Env = append(os.Environ(), workerEnv+"=election")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	stops.add(p.kill)
	var pipes sync.WaitGroup
	pipes.Go(func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.tail = append(p.tail[max(0, len(p.tail)-4):], sc.Text())
			p.mu.Unlock()
		}
	})
	pipes.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			what, rest, _ := strings.Cut(sc.Text(), " ")
			ev := procEvent{p: p, what: what, msg: rest}
			if what == "lead" {
				at, term, _ := strings.Cut(rest, " ")
				ns, err1 := strconv.ParseInt(at, 10, 64)
				t, err2 := strconv.ParseInt(term, 10, 64)
				if err := errors.Join(err1, err2); err != nil {
					ev.what, ev.msg = "error", fmt.Sprintf("unreadable line %q: %v", sc.Text(), err)
				}
				ev.at, ev.term = time.Unix(0, ns), t
			}
			events <- ev
		}
	})
	go func() {
		pipes.Wait()
		err := p.cmd.Wait()
		p.mu.Lock()
		msg := fmt.Sprintf("%v; stderr: %s", err, strings.Join(p.tail, " | "))
		p.mu.Unlock()
		close(p.done)
		events <- procEvent{p: p, what: "exit", msg: msg}
	}()
	return p, nil
}

// kill sends SIGKILL and waits for the process's end.
func (p *electionProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// killRounds keeps electionCandidates candidate processes of one election
// and measures, rounds times, from the moment the bench sends SIGKILL to
// the leader's process to the moment another process's Campaign returns
// (the wall clock, read in each process: one machine, one clock). After
// each round a new process joins the line, so that the next round has as
// many candidates; each kill waits lineSettle and a random 0–TTL/2 after
// the line is complete, so that it falls at any point of the leader's
// renewal period.
func killRounds(s electionSystem, rounds int, stops *stopper) ([]time.Duration, error) {
	name := fmt.Sprintf("kill-%s-%d", s.setting, time.Now().UnixNano())
	count, closeCount, err := s.waiting(name)
	if err != nil {
		return nil, err
	}
	defer closeCount()
	events := make(chan procEvent, 64)
	alive := map[*electionProc]bool{}
	defer func() {
		for p := range alive {
			p.kill()
		}
	}()
	seq := 0
	spawn := func() error {
		seq++
		p, err := startProc(s, name, fmt.Sprint("candidate-", seq), events, stops)
		if err != nil {
			return err
		}
		alive[p] = true
		return nil
	}
	// nextLeader waits for a "lead" from a live process, for at most 5 TTL.
	nextLeader := func() (procEvent, error) {
		timeout := time.After(5 * electionTTL)
		for {
			select {
			case ev := <-events:
				switch {
				case ev.what == "lead" && alive[ev.p]:
					return ev, nil
				case ev.what == "error", ev.what == "exit" && alive[ev.p]:
					return ev, fmt.Errorf("candidate %s: %s %s", ev.p.value, ev.what, ev.msg)
				}
			case <-timeout:
				return procEvent{}, fmt.Errorf("no candidate led within %v", 5*electionTTL)
			}
		}
	}
	for range electionCandidates {
		if err := spawn(); err != nil {
			return nil, err
		}
	}
	lead, err := nextLeader()
	if err != nil {
		return nil, fmt.Errorf("first leader: %w", err)
	}
	var ds []time.Duration
	for round := range rounds {
		if err := waitInLine(count, electionCandidates-1); err != nil {
			return nil, fmt.Errorf("round %d: %w", round+1, err)
		}
		time.Sleep(lineSettle + rand.N(electionTTL/2))
		victim := lead.p
		t0 := time.Now()
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("round %d: kill the leader: %w", round+1, err)
		}
		delete(alive, victim)
		next, err := nextLeader()
		if err != nil {
			return nil, fmt.Errorf("round %d: after the leader was killed: %w", round+1, err)
		}
		if next.term <= lead.term {
			return nil, fmt.Errorf("round %d: the new term %d is not above the killed leader's %d", round+1, next.term, lead.term)
		}
		ds = append(ds, next.at.Sub(t0))
		victim.kill() // reaps it
		lead = next
		if err := spawn(); err != nil {
			return nil, err
		}
	}
	return ds, nil
}
