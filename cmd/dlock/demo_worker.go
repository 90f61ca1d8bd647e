package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/stock"
	"github.com/redis/go-redis/v9"
)

// A worker is one OS process of the demo: "dlock demo" starts the program it
// runs as (os.Executable) again, with the hidden command workerCommand.
//
// The protocol, over the worker's stdin and stdout:
//
//  1. the worker connects to Redis, then writes readyLine;
//  2. the parent, once every worker is ready, writes goLine to each: they all
//     start buying at the same moment;
//  3. the worker writes its workerReport as one JSON value and exits.
//
// When its stdin closes (the parent stopped it, or died) the worker stops
// buying and exits with an error. A worker that fails exits with status 1
// and says why on stderr.
const (
	workerCommand = "demo-worker"
	readyLine     = "ready"
	goLine        = "go"

	// workerEnv is "1" in every worker's environment. When the demo runs in
	// a test, the worker is the test binary, whose TestMain calls main when
	// it sees this.
	workerEnv = "DLOCK_DEMO_WORKER"
	// redisEnv carries the Redis URL to the worker: in the environment
	// rather than in the arguments, where ps would show its password.
	redisEnv = "DLOCK_DEMO_REDIS"
)

// voucherID is the voucher on sale.
const voucherID = "1"

// errParentGone is why a worker stops when its stdin closes.
var errParentGone = errors.New("the demo stopped this worker (its stdin closed)")

// workerConfig is one worker's share of a sale.
type workerConfig struct {
	strategy string
	keys     string // prefix of the sale's keys (see saleKeys)
	locks    string // key prefix of the dlock Client
	buyers   int
	clicks   int // per buyer
	procs    int // workers in the sale
	index    int // this worker's number, from 0
	workers  int // goroutines
	work     time.Duration
}

// args returns the command-line flags that parseWorkerFlags turns back into c.
func (c workerConfig) args() []string {
	return []string{
		"-strategy", c.strategy, "-keys", c.keys, "-locks", c.locks,
		"-buyers", strconv.Itoa(c.buyers), "-clicks", strconv.Itoa(c.clicks),
		"-procs", strconv.Itoa(c.procs), "-index", strconv.Itoa(c.index),
		"-workers", strconv.Itoa(c.workers), "-work", c.work.String(),
	}
}

func parseWorkerFlags(args []string) (workerConfig, error) {
	var c workerConfig
	fs := flag.NewFlagSet("dlock "+workerCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.strategy, "strategy", "", "")
	fs.StringVar(&c.keys, "keys", "", "")
	fs.StringVar(&c.locks, "locks", "", "")
	fs.IntVar(&c.buyers, "buyers", 0, "")
	fs.IntVar(&c.clicks, "clicks", 0, "")
	fs.IntVar(&c.procs, "procs", 0, "")
	fs.IntVar(&c.index, "index", 0, "")
	fs.IntVar(&c.workers, "workers", 0, "")
	fs.DurationVar(&c.work, "work", 0, "")
	bad := func(format string, args ...any) (workerConfig, error) {
		return c, usagef("dlock %s: %s (this command is run by 'dlock demo', not by hand)", workerCommand, fmt.Sprintf(format, args...))
	}
	if err := fs.Parse(args); err != nil {
		return bad("%v", err)
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case !slices.Contains(allStrategies, c.strategy):
		return bad("unknown strategy %q", c.strategy)
	case c.keys == "" || c.locks == "":
		return bad("-keys and -locks are required")
	case c.buyers < 1 || c.clicks < 1 || c.workers < 1 || c.procs < 1:
		return bad("-buyers, -clicks, -procs and -workers must be at least 1")
	case c.index < 0 || c.index >= c.procs:
		return bad("-index %d is not in [0, %d)", c.index, c.procs)
	case c.work < 0:
		return bad("-work must not be negative")
	}
	return c, nil
}

// share returns, in buyer order, the buyers whose clicks worker index of
// procs makes: click j of buyer b goes to worker (b+j) mod procs. So the
// clicks of one buyer land in different processes, and since every worker
// goes through its buyers in the same order, at about the same moment.
func share(buyers, clicks, procs, index int) []int {
	var out []int
	for b := range buyers {
		for j := range clicks {
			if (b+j)%procs == index {
				out = append(out, b)
			}
		}
	}
	return out
}

// buyerID is the id of buyer b in orders and lock names.
func buyerID(b int) string { return strconv.Itoa(b + 1) }

// outcome is how one click ended.
type outcome int

const (
	bought        outcome = iota
	soldOut               // no stock left
	alreadyBought         // the one-per-buyer check found an order
	busy                  // another click of the same buyer held the buyer's lock
)

// outcomes counts clicks by outcome.
type outcomes struct {
	Bought        int `json:"bought"`
	SoldOut       int `json:"sold_out"`
	AlreadyBought int `json:"already_bought"`
	Busy          int `json:"busy"`
}

func (o *outcomes) count(x outcome) {
	switch x {
	case bought:
		o.Bought++
	case soldOut:
		o.SoldOut++
	case alreadyBought:
		o.AlreadyBought++
	case busy:
		o.Busy++
	}
}

func (o *outcomes) add(p outcomes) {
	o.Bought += p.Bought
	o.SoldOut += p.SoldOut
	o.AlreadyBought += p.AlreadyBought
	o.Busy += p.Busy
}

func (o outcomes) total() int { return o.Bought + o.SoldOut + o.AlreadyBought + o.Busy }

// workerReport is what a worker tells the parent when it is done.
type workerReport struct {
	Outcomes  outcomes        `json:"outcomes"`
	Latencies []time.Duration `json:"latencies_ns"` // of every click
}

// runWorker is the hidden command workerCommand.
func runWorker(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	cfg, err := parseWorkerFlags(args)
	if err != nil {
		return err
	}
	w, err := newWorker(ctx, cfg)
	if err != nil {
		return fmt.Errorf("dlock %s: %w", workerCommand, err)
	}
	defer w.close()

	if _, err := fmt.Fprintln(stdout, readyLine); err != nil {
		return fmt.Errorf("dlock %s: say ready: %w", workerCommand, err)
	}
	in := bufio.NewReader(stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != goLine {
		return fmt.Errorf("dlock %s: no start signal: %w", workerCommand, errParentGone)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// Reads stdin until it closes, for the rest of the process's life.
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel(errParentGone)
	}()

	rep, err := w.buyAll(ctx)
	if err != nil {
		return fmt.Errorf("dlock %s %d (%s): %w", workerCommand, cfg.index+1, cfg.strategy, err)
	}
	if err := json.NewEncoder(stdout).Encode(rep); err != nil {
		return fmt.Errorf("dlock %s: write the report: %w", workerCommand, err)
	}
	return nil
}

// worker buys, with one strategy, on one process's share of the clicks.
type worker struct {
	cfg workerConfig
	rdb *redis.Client
	k   saleKeys
	buy func(ctx context.Context, buyer string) (outcome, error)

	mu sync.Mutex // the local strategy's lock

	locks   *dlock.Client // the dlock strategy's
	voucher *dlock.Mutex

	sales *stock.Sales // the script strategy's
}

func newWorker(ctx context.Context, cfg workerConfig) (*worker, error) {
	url := os.Getenv(redisEnv)
	if url == "" {
		return nil, fmt.Errorf("no Redis URL in $%s (this command is run by 'dlock demo', not by hand)", redisEnv)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", redisEnv, err)
	}
	opt.PoolSize = max(opt.PoolSize, cfg.workers+2) // a connection per goroutine, and pub/sub
	w := &worker{cfg: cfg, rdb: redis.NewClient(opt), k: newSaleKeys(cfg.keys)}
	if err := w.warmUp(ctx); err != nil {
		_ = w.rdb.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", opt.Addr, err)
	}
	switch cfg.strategy {
	case strategyNoLock:
		w.buy = w.buyUnlocked
	case strategyLocal:
		w.buy = w.buyLocalMutex
	case strategyDlock:
		c, err := dlock.New(w.rdb, dlock.WithPrefix(cfg.locks))
		if err != nil {
			_ = w.rdb.Close()
			return nil, fmt.Errorf("make the dlock client: %w", err)
		}
		w.locks = c
		w.voucher = c.Mutex("voucher:" + voucherID)
		w.buy = w.buyDlock
	case strategyScript:
		sales, ids, err := scriptSales(w.rdb, cfg.keys)
		if err == nil {
			// The first order id of a process may wait for Redis's next
			// second (idgen); take one before the race starts.
			_, err = ids.Next(ctx)
		}
		if err != nil {
			_ = w.rdb.Close()
			return nil, fmt.Errorf("open the sale: %w", err)
		}
		w.sales = sales
		w.buy = w.buyScript
	}
	return w, nil
}

// warmUp opens a connection for each goroutine, so that dialing Redis is
// done before the race starts.
func (w *worker) warmUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	errs := make([]error, w.cfg.workers)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = w.rdb.Ping(ctx).Err() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err // they are most likely all the same
		}
	}
	return nil
}

func (w *worker) close() {
	if w.locks != nil {
		_ = w.locks.Close()
	}
	_ = w.rdb.Close()
}

// buyAll makes this worker's clicks, cfg.workers at a time, and reports how
// they ended. The first error stops it.
func (w *worker) buyAll(ctx context.Context) (workerReport, error) {
	buyers := share(w.cfg.buyers, w.cfg.clicks, w.cfg.procs, w.cfg.index)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	parts := make([]workerReport, w.cfg.workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() {
			part := &parts[i]
			for ctx.Err() == nil {
				n := int(next.Add(1) - 1)
				if n >= len(buyers) {
					return
				}
				start := time.Now()
				o, err := w.buy(ctx, buyerID(buyers[n]))
				took := time.Since(start)
				if err == nil {
					if err = w.rdb.Incr(ctx, w.k.clicks).Err(); err != nil {
						err = fmt.Errorf("count the click: %w", err)
					}
				}
				if err != nil {
					cancel(err)
					return
				}
				part.Outcomes.count(o)
				part.Latencies = append(part.Latencies, took)
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return workerReport{}, context.Cause(ctx)
	}
	var rep workerReport
	rep.Latencies = make([]time.Duration, 0, len(buyers))
	for _, p := range parts {
		rep.Outcomes.add(p.Outcomes)
		rep.Latencies = append(rep.Latencies, p.Latencies...)
	}
	return rep, nil
}

// buyUnlocked is the flash-sale code as first written: read the stock, check
// it, check the buyer has no order yet, write the stock back one lower, place
// the order. Each step is atomic in Redis; the sequence is not.
func (w *worker) buyUnlocked(ctx context.Context, buyer string) (outcome, error) {
	stock, err := w.stock(ctx)
	if err != nil {
		return 0, err
	}
	if stock <= 0 {
		return soldOut, nil
	}
	has, err := w.hasOrder(ctx, buyer)
	if err != nil {
		return 0, err
	}
	if has {
		return alreadyBought, nil
	}
	time.Sleep(w.cfg.work)
	if err := w.rdb.Set(ctx, w.k.stock, stock-1, 0).Err(); err != nil {
		return 0, fmt.Errorf("write the stock: %w", err)
	}
	return bought, w.placeOrder(ctx, buyer)
}

// buyLocalMutex is buyUnlocked under a mutex of this process: the goroutines
// of this process take turns, the other processes do not care.
func (w *worker) buyLocalMutex(ctx context.Context, buyer string) (outcome, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buyUnlocked(ctx, buyer)
}

// buyDlock is dlock's answer. A lock per buyer, taken with TryLock, turns
// away a second click of the same buyer while the first is being served, and
// makes "check for an order, then order" one step for that buyer across all
// processes. Inside it, the voucher's lock does the same for "read the stock,
// then write it".
func (w *worker) buyDlock(ctx context.Context, buyer string) (_ outcome, err error) {
	// The stock never goes up, so a sold-out voucher needs no lock to say so:
	// most clicks of a flash sale end here, after one round trip.
	stock, err := w.stock(ctx)
	if err != nil {
		return 0, err
	}
	if stock <= 0 {
		return soldOut, nil
	}

	lease, err := w.locks.Mutex("buyer:" + buyer).TryLock(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) {
		return busy, nil
	}
	if err != nil {
		return 0, err
	}
	defer func() {
		if uerr := lease.Unlock(ctx); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unlock buyer %s: %w", buyer, uerr))
		}
	}()
	has, err := w.hasOrder(ctx, buyer)
	if err != nil {
		return 0, err
	}
	if has {
		return alreadyBought, nil
	}

	took := false
	err = w.voucher.Do(ctx, func(ctx context.Context) error {
		stock, err := w.stock(ctx)
		if err != nil || stock <= 0 {
			return err
		}
		time.Sleep(w.cfg.work)
		if err := w.rdb.Set(ctx, w.k.stock, stock-1, 0).Err(); err != nil {
			return fmt.Errorf("write the stock: %w", err)
		}
		took = true
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !took {
		return soldOut, nil
	}
	return bought, w.placeOrder(ctx, buyer)
}

// buyScript is the stock package's Buy: the stock check, the buyer check,
// the deduction and the order intent in one script, atomic in Redis. The
// order is counted as the other strategies count theirs, for the tally.
func (w *worker) buyScript(ctx context.Context, buyer string) (outcome, error) {
	r, err := w.sales.Buy(ctx, saleID, buyer, 1)
	if err != nil {
		return 0, err
	}
	switch r.Outcome {
	case stock.Ordered:
		return bought, w.placeOrder(ctx, buyer)
	case stock.AlreadyOrdered:
		return alreadyBought, nil
	case stock.SoldOut:
		return soldOut, nil
	}
	return 0, fmt.Errorf("buy for %s: %v", buyer, r.Outcome)
}

func (w *worker) stock(ctx context.Context) (int64, error) {
	n, err := w.rdb.Get(ctx, w.k.stock).Int64()
	if err != nil {
		return 0, fmt.Errorf("read the stock: %w", err)
	}
	return n, nil
}

func (w *worker) hasOrder(ctx context.Context, buyer string) (bool, error) {
	has, err := w.rdb.HExists(ctx, w.k.orders, buyer).Result()
	if err != nil {
		return false, fmt.Errorf("look for an order of buyer %s: %w", buyer, err)
	}
	return has, nil
}

func (w *worker) placeOrder(ctx context.Context, buyer string) error {
	if err := w.rdb.HIncrBy(ctx, w.k.orders, buyer, 1).Err(); err != nil {
		return fmt.Errorf("place the order of buyer %s: %w", buyer, err)
	}
	if err := w.rdb.Incr(ctx, w.k.sold).Err(); err != nil {
		return fmt.Errorf("count the order of buyer %s: %w", buyer, err)
	}
	return nil
}

// The parent's side: starting the workers and hearing from them.

// workerFailure is the error of a worker that stopped before its time. Once
// the worker has exited, its proc's exitErr says why.
type workerFailure struct {
	proc *workerProc
	when string
}

func (e *workerFailure) Error() string {
	return fmt.Sprintf("worker %d stopped %s", e.proc.index+1, e.when)
}

// workerGroup is the worker processes of one strategy.
type workerGroup struct {
	procs   []*workerProc
	events  chan workerEvent
	readers sync.WaitGroup // one goroutine per worker reads its stdout
}

// workerProc is one worker process and the parent's ends of its pipes.
type workerProc struct {
	index   int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  bytes.Buffer // read only after cmd.Wait
	exitErr error        // how it exited, if it failed; set by workerGroup.stop
}

// workerEvent is what a worker said: that it is ready, or its report, or
// (err != nil) that it stopped without saying either.
type workerEvent struct {
	proc   *workerProc
	report workerReport
	err    error
}

// startWorkers starts the worker processes of one strategy. They connect to
// Redis and report ready, then wait for the start signal.
func (d *demo) startWorkers(strategy string) (*workerGroup, error) {
	g := &workerGroup{events: make(chan workerEvent, 2*d.cfg.procs)}
	for i := range d.cfg.procs {
		wc := workerConfig{
			strategy: strategy, keys: d.prefix + strategy + ":", locks: d.prefix + "lock:",
			buyers: d.cfg.buyers, clicks: d.cfg.clicks, procs: d.cfg.procs, index: i,
			workers: d.cfg.workers, work: d.cfg.work,
		}
		if err := g.startOne(d.exe, d.url, wc); err != nil {
			_ = g.stop()
			return nil, fmt.Errorf("start worker %d of %d (%s): %w", i+1, d.cfg.procs, d.exe, err)
		}
	}
	return g, nil
}

// startOne starts one worker running exe with cfg, connecting to url, and
// the goroutine that reads what it says.
func (g *workerGroup) startOne(exe, url string, cfg workerConfig) error {
	cmd := exec.Command(exe, append([]string{workerCommand}, cfg.args()...)...)
	cmd.Env = append(os.Environ(), workerEnv+"=1", redisEnv+"="+url)
	p := &workerProc{index: cfg.index, cmd: cmd}
	cmd.Stderr = &p.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		_ = stdin.Close()
		return err
	}
	if err := cmd.Start(); err != nil { // closes both pipes
		return err
	}
	p.stdin = stdin
	g.procs = append(g.procs, p)
	g.readers.Add(1)
	go g.read(p, stdout)
	return nil
}

// read reads a worker's stdout: the ready line, then the JSON report.
func (g *workerGroup) read(p *workerProc, stdout io.Reader) {
	defer g.readers.Done()
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != readyLine {
		g.events <- workerEvent{proc: p, err: &workerFailure{proc: p, when: "before it was ready"}}
		return
	}
	g.events <- workerEvent{proc: p}
	var rep workerReport
	if err := json.NewDecoder(br).Decode(&rep); err != nil {
		g.events <- workerEvent{proc: p, err: &workerFailure{proc: p, when: "without a report"}}
		return
	}
	g.events <- workerEvent{proc: p, report: rep}
}

// start sends every worker the start signal.
func (g *workerGroup) start() error {
	for _, p := range g.procs {
		if _, err := io.WriteString(p.stdin, goLine+"\n"); err != nil {
			return &workerFailure{proc: p, when: "before the start"}
		}
	}
	return nil
}

// stop tells every worker to stop by closing its stdin, kills those that do
// not exit within stopGrace, and waits for all of them. The error names each
// worker that exited with an error, with the end of what it wrote to stderr.
func (g *workerGroup) stop() error {
	for _, p := range g.procs {
		_ = p.stdin.Close()
	}
	kill := time.AfterFunc(stopGrace, func() {
		for _, p := range g.procs {
			_ = p.cmd.Process.Kill()
		}
	})
	g.readers.Wait()
	var errs []error
	for _, p := range g.procs {
		if err := p.cmd.Wait(); err != nil {
			if msg := lastLines(p.stderr.String(), 5); msg != "" {
				err = fmt.Errorf("%w: %s", err, msg)
			}
			p.exitErr = fmt.Errorf("worker %d of %d: %w", p.index+1, len(g.procs), err)
			errs = append(errs, p.exitErr)
		}
	}
	kill.Stop()
	return errors.Join(errs...)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
