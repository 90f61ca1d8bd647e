package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/idgen"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/stock"
	"github.com/redis/go-redis/v9"
)

// The demo's defaults. With them the unlocked strategies oversell by
// hundreds on every run, and the whole demo takes one or two seconds.
const (
	defaultRedisURL = "redis://127.0.0.1:6379"
	defaultVouchers = 100
	defaultBuyers   = 1000
	defaultClicks   = 3
	defaultProcs    = 4
	defaultWorkers  = 16
	// defaultWork is the pause between reading the stock and writing it back:
	// the time a real service spends on checks, a database call or a remote
	// call at that point. It is what opens the window that the unlocked
	// strategies race through.
	defaultWork = time.Millisecond
)

// Limits that keep a mistyped flag from starting thousands of processes.
const (
	maxProcs   = 64
	maxWorkers = 1024
	maxClicks  = 10_000_000 // buyers × clicks
)

const (
	// probeTimeout is how long the Redis at --redis has to answer a PING
	// before a private redis-server is started instead.
	probeTimeout = time.Second
	// startupTimeout bounds the time from starting the workers until all of
	// them are connected and ready.
	startupTimeout = 30 * time.Second
	// stopGrace is how long workers have to exit once told to, before they
	// are killed.
	stopGrace = 5 * time.Second
	// progressInterval is how often the progress line is redrawn.
	progressInterval = 100 * time.Millisecond
)

// The strategies, from no lock at all to dlock's.
const (
	strategyNoLock = "nolock" // read, check, wait, write: no lock at all
	strategyLocal  = "local"  // the same under a sync.Mutex of each process
	strategyDlock  = "dlock"  // a dlock Mutex per buyer and one on the voucher
	strategyScript = "script" // the stock package: check and deduct in one script, no lock
)

var allStrategies = []string{strategyNoLock, strategyLocal, strategyDlock, strategyScript}

// saleID names the sale of the script strategy, in the stock package.
const saleID = "voucher"

// demoConfig is what the flags of "dlock demo" set.
type demoConfig struct {
	redisURL   string
	vouchers   int
	buyers     int
	clicks     int // per buyer, all at once
	procs      int // worker processes per strategy
	workers    int // goroutines per worker process
	work       time.Duration
	strategies []string
}

// totalClicks is the number of purchase attempts made per strategy.
func (c demoConfig) totalClicks() int { return c.buyers * c.clicks }

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseDemoFlags(args, stdout)
	if err != nil || cfg == nil {
		return err
	}
	results, err := runSale(ctx, *cfg, stdout, stderr)
	if err != nil {
		return err
	}
	return printResults(stdout, *cfg, results)
}

// parseDemoFlags parses the flags of "dlock demo". For -h it prints the usage
// to stdout and returns a nil config and a nil error.
func parseDemoFlags(args []string, stdout io.Writer) (*demoConfig, error) {
	cfg := &demoConfig{}
	var strategies string
	fs := flag.NewFlagSet("dlock demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, usage is printed on -h only
	fs.StringVar(&cfg.redisURL, "redis", defaultRedisURL,
		"`URL` of the Redis to use; if nothing answers there within 1s, a private redis-server is started")
	fs.IntVar(&cfg.vouchers, "vouchers", defaultVouchers, "vouchers in stock at the start of the sale")
	fs.IntVar(&cfg.buyers, "buyers", defaultBuyers, "buyers, each allowed one voucher")
	fs.IntVar(&cfg.clicks, "clicks", defaultClicks, "times each buyer clicks \"buy\" at once, the clicks spread over the processes")
	fs.IntVar(&cfg.procs, "procs", defaultProcs, "worker OS processes per strategy")
	fs.IntVar(&cfg.workers, "workers", defaultWorkers, "goroutines per worker process")
	fs.DurationVar(&cfg.work, "work", defaultWork, "simulated work between reading the stock and writing it back")
	fs.StringVar(&strategies, "strategies", strings.Join(allStrategies, ","),
		"comma-separated `list` of strategies to run, in order: "+strings.Join(allStrategies, ", "))

	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printDemoUsage(stdout, fs)
			return nil, nil
		}
		return nil, usagef("dlock demo: %v (run 'dlock demo -h' for usage)", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("dlock demo: unexpected argument %q (run 'dlock demo -h' for usage)", fs.Arg(0))
	}
	var err error
	if cfg.strategies, err = parseStrategies(strategies); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func printDemoUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage: dlock demo [flags]

Runs a flash sale: buyers click "buy" on a voucher with limited stock, several
clicks of each buyer at once, from several OS processes sharing one Redis. The
sale runs once per strategy: with no lock, with a sync.Mutex in each process,
and with dlock. Each run counts what was sold, oversold and ordered twice.

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func parseStrategies(list string) ([]string, error) {
	var out []string
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
			continue
		case !slices.Contains(allStrategies, s):
			return nil, usagef("dlock demo: unknown strategy %q in --strategies (known: %s)", s, strings.Join(allStrategies, ", "))
		case slices.Contains(out, s):
			return nil, usagef("dlock demo: strategy %q given twice in --strategies", s)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, usagef("dlock demo: --strategies is empty (known: %s)", strings.Join(allStrategies, ", "))
	}
	return out, nil
}

func (c *demoConfig) validate() error {
	if _, err := redis.ParseURL(c.redisURL); err != nil {
		return usagef("dlock demo: --redis %q: %v", c.redisURL, err)
	}
	for _, f := range []struct {
		name     string
		val, max int
	}{
		{"vouchers", c.vouchers, maxClicks},
		{"buyers", c.buyers, maxClicks},
		{"clicks", c.clicks, maxClicks},
		{"procs", c.procs, maxProcs},
		{"workers", c.workers, maxWorkers},
	} {
		if f.val < 1 || f.val > f.max {
			return usagef("dlock demo: --%s is %d; it must be between 1 and %d", f.name, f.val, f.max)
		}
	}
	if c.buyers > maxClicks/c.clicks {
		return usagef("dlock demo: --buyers × --clicks is over %d", maxClicks)
	}
	if c.work < 0 {
		return usagef("dlock demo: --work is %v; it must not be negative", c.work)
	}
	return nil
}

// demo is one run of the sale: its Redis, its keys and its workers.
type demo struct {
	cfg    demoConfig
	rdb    *redis.Client
	url    string // the URL workers connect to
	prefix string // starts every key this run creates
	exe    string // the program run as a worker
	stderr io.Writer
}

// runSale runs the sale once per strategy and returns what each sold. It
// writes a description of the run to stdout and progress to stderr, and
// deletes every key it created before it returns.
func runSale(ctx context.Context, cfg demoConfig, stdout, stderr io.Writer) (_ []saleResult, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("dlock demo: find the program to run as a worker: %w", err)
	}
	prefix, err := newPrefix()
	if err != nil {
		return nil, err
	}
	rdb, url, closeRedis, err := connect(ctx, cfg.redisURL, stderr)
	if err != nil {
		return nil, err
	}
	defer closeRedis()
	defer func() {
		if derr := deleteKeys(ctx, rdb, prefix); derr != nil {
			err = errors.Join(err, fmt.Errorf("dlock demo: %w", derr))
		}
	}()
	d := &demo{cfg: cfg, rdb: rdb, url: url, prefix: prefix, exe: exe, stderr: stderr}

	fmt.Fprintf(stdout, "Flash sale: %d vouchers, %d buyers clicking \"buy\" %d times at once (%d clicks),\n",
		cfg.vouchers, cfg.buyers, cfg.clicks, cfg.totalClicks())
	fmt.Fprintf(stdout, "%d processes × %d goroutines per strategy, %v between reading the stock and writing it.\n",
		cfg.procs, cfg.workers, cfg.work)
	fmt.Fprintf(stdout, "Redis %s; the keys of this run start with %q and are deleted at the end.\n",
		rdb.Options().Addr, prefix)

	results := make([]saleResult, 0, len(cfg.strategies))
	for _, s := range cfg.strategies {
		r, err := d.runStrategy(ctx, s)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("dlock demo: interrupted during %s: %w", s, context.Cause(ctx))
			}
			return nil, fmt.Errorf("dlock demo: %s: %w", s, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// newPrefix returns a key prefix no other run uses.
func newPrefix() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dlock demo: make a key prefix: %w", err)
	}
	return "dlock-demo:" + hex.EncodeToString(b[:]) + ":", nil
}

// connect returns a client of the Redis at rawURL and the URL for workers.
// If nothing answers there within probeTimeout, it starts a private
// redis-server instead and says so on stderr. closeRedis closes the client
// and stops that server.
func connect(ctx context.Context, rawURL string, stderr io.Writer) (rdb *redis.Client, url string, closeRedis func(), err error) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, "", nil, usagef("dlock demo: --redis %q: %v", rawURL, err)
	}
	rdb = redis.NewClient(opt)
	probeErr := probe(ctx, rdb)
	if probeErr == nil {
		return rdb, rawURL, func() { _ = rdb.Close() }, nil
	}
	_ = rdb.Close()
	if ctx.Err() != nil {
		return nil, "", nil, fmt.Errorf("dlock demo: interrupted while connecting to Redis: %w", context.Cause(ctx))
	}
	if _, ok := errors.AsType[redis.Error](probeErr); ok {
		// Something answered: it is a Redis, and it refused.
		if err := authHint("dlock demo: Redis at "+opt.Addr, probeErr, demoLoginHint); err != probeErr {
			return nil, "", nil, err
		}
		return nil, "", nil, fmt.Errorf("dlock demo: Redis at %s: %w", opt.Addr, probeErr)
	}

	dir, err := os.MkdirTemp("", "dlock-demo-redis-")
	if err != nil {
		return nil, "", nil, fmt.Errorf("dlock demo: no Redis at %s (%v), and no directory for a private one: %w", opt.Addr, probeErr, err)
	}
	srv, err := redistest.Launch(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, "", nil, fmt.Errorf("dlock demo: no Redis at %s (%v), and no private one could be started: %w", opt.Addr, probeErr, err)
	}
	fmt.Fprintf(stderr, "no Redis at %s; started a private redis-server on %s\n", opt.Addr, srv.Addr)
	rdb = redis.NewClient(srv.Options())
	closeRedis = func() {
		_ = rdb.Close()
		_ = srv.Close()
		_ = os.RemoveAll(dir)
	}
	return rdb, "redis://" + srv.Addr, closeRedis, nil
}

// probe checks that the Redis of rdb answers a PING within probeTimeout. It
// dials the address itself first, so that when nothing listens there it
// knows at once, not after the Redis client's retries with backoff.
func probe(ctx context.Context, rdb *redis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	opt := rdb.Options()
	var d net.Dialer
	conn, err := d.DialContext(ctx, opt.Network, opt.Addr)
	if err != nil {
		return err
	}
	_ = conn.Close()
	return rdb.Ping(ctx).Err()
}

// deleteKeys deletes every key that starts with prefix. It runs also after
// ctx is cancelled, bounded by a timeout of its own.
func deleteKeys(ctx context.Context, rdb *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := rdb.Unlink(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			if err := flush(); err != nil {
				return fmt.Errorf("delete the keys of this run (%s*): %w", prefix, err)
			}
		}
	}
	if err := errors.Join(iter.Err(), flush()); err != nil {
		return fmt.Errorf("delete the keys of this run (%s*): %w", prefix, err)
	}
	return nil
}

// saleKeys names the keys of one strategy's sale.
type saleKeys struct {
	stock  string // string: vouchers left
	orders string // hash: buyer id -> orders placed
	sold   string // string: orders placed, all buyers
	clicks string // string: clicks handled, for the progress line
}

func newSaleKeys(prefix string) saleKeys {
	return saleKeys{stock: prefix + "stock", orders: prefix + "orders", sold: prefix + "sold", clicks: prefix + "clicks"}
}

// saleResult is what one strategy's sale came to.
type saleResult struct {
	Strategy   string
	Vouchers   int64         // stock at the start
	Sold       int64         // orders placed
	Buyers     int64         // distinct buyers with an order
	Duplicates int64         // orders beyond a buyer's first
	FinalStock int64         // stock at the end
	Clicks     int64         // clicks handled
	Wall       time.Duration // from the start signal until every worker reported
	Outcomes   outcomes      // how the clicks ended, as the workers saw it
	P50, P99   time.Duration // click latency
}

// Oversold is how many more vouchers were sold than there were.
func (r saleResult) Oversold() int64 { return max(0, r.Sold-r.Vouchers) }

// LostDecrements is how many orders the stock does not account for: sales
// whose decrement of the stock was overwritten by another sale's.
func (r saleResult) LostDecrements() int64 { return r.Sold - (r.Vouchers - r.FinalStock) }

// Exact reports whether the sale went as it should: no voucher sold that did
// not exist, none sold twice to one buyer, and the stock agrees with the
// orders.
func (r saleResult) Exact() bool {
	return r.Oversold() == 0 && r.Duplicates == 0 && r.LostDecrements() == 0 && r.FinalStock >= 0
}

// runStrategy runs one strategy's sale on fresh keys with fresh workers.
func (d *demo) runStrategy(ctx context.Context, strategy string) (saleResult, error) {
	k := newSaleKeys(d.prefix + strategy + ":")
	if strategy == strategyScript {
		sales, _, err := scriptSales(d.rdb, d.prefix+strategy+":")
		if err == nil {
			_, err = sales.Create(ctx, saleID, int64(d.cfg.vouchers), time.Hour)
		}
		if err != nil {
			return saleResult{}, fmt.Errorf("create the sale: %w", err)
		}
	} else if err := d.rdb.Set(ctx, k.stock, d.cfg.vouchers, 0).Err(); err != nil {
		return saleResult{}, fmt.Errorf("set the stock: %w", err)
	}
	g, err := d.startWorkers(strategy)
	if err != nil {
		return saleResult{}, err
	}
	res, err := d.sell(ctx, g, strategy, k)
	stopErr := g.stop()
	if err == nil {
		return res, stopErr
	}
	if wf, ok := errors.AsType[*workerFailure](err); ok && wf.proc.exitErr != nil {
		return saleResult{}, wf.proc.exitErr // says why the worker stopped
	}
	return saleResult{}, err
}

// sell waits until every worker is ready, starts them all at once, shows
// progress until all have reported, and tallies the sale.
func (d *demo) sell(ctx context.Context, g *workerGroup, strategy string, k saleKeys) (saleResult, error) {
	startup := time.NewTimer(startupTimeout)
	defer startup.Stop()
	for ready := 0; ready < len(g.procs); {
		select {
		case ev := <-g.events:
			if ev.err != nil {
				return saleResult{}, ev.err
			}
			ready++
		case <-startup.C:
			return saleResult{}, fmt.Errorf("the workers were not ready after %v", startupTimeout)
		case <-ctx.Done():
			return saleResult{}, context.Cause(ctx)
		}
	}

	start := time.Now()
	if err := g.start(); err != nil {
		return saleResult{}, err
	}
	prog := newProgress(d.stderr, strategy, int64(d.cfg.totalClicks()))
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	reports := make([]workerReport, 0, len(g.procs))
	for len(reports) < len(g.procs) {
		select {
		case ev := <-g.events:
			if ev.err != nil {
				prog.abandon()
				return saleResult{}, ev.err
			}
			reports = append(reports, ev.report)
		case <-tick.C:
			if n, err := d.clicksSoFar(ctx, k); err == nil {
				prog.show(n)
			}
		case <-ctx.Done():
			prog.abandon()
			return saleResult{}, context.Cause(ctx)
		}
	}
	wall := time.Since(start)
	prog.finish(wall)
	return d.tally(ctx, strategy, k, reports, wall)
}

// clicksSoFar reads the count of clicks handled, for the progress line. It
// gives up after one progress interval, so that a slow Redis cannot hold up
// the loop that waits for the workers.
func (d *demo) clicksSoFar(ctx context.Context, k saleKeys) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, progressInterval)
	defer cancel()
	return d.rdb.Get(ctx, k.clicks).Int64()
}

// tally reads the outcome of a sale from Redis and checks it against the
// workers' reports.
func (d *demo) tally(ctx context.Context, strategy string, k saleKeys, reports []workerReport, wall time.Duration) (saleResult, error) {
	r := saleResult{Strategy: strategy, Vouchers: int64(d.cfg.vouchers), Wall: wall}
	var lat []time.Duration
	for _, rep := range reports {
		r.Outcomes.add(rep.Outcomes)
		lat = append(lat, rep.Latencies...)
	}
	r.P50, r.P99 = percentile(lat, 0.50), percentile(lat, 0.99)

	var err error
	if r.Sold, err = getInt(ctx, d.rdb, k.sold); err != nil {
		return r, fmt.Errorf("read the orders placed: %w", err)
	}
	if strategy == strategyScript {
		sales, _, err := scriptSales(d.rdb, d.prefix+strategy+":")
		if err == nil {
			r.FinalStock, err = sales.Left(ctx, saleID)
		}
		if err != nil {
			return r, fmt.Errorf("read the stock: %w", err)
		}
	} else if r.FinalStock, err = getInt(ctx, d.rdb, k.stock); err != nil {
		return r, fmt.Errorf("read the stock: %w", err)
	}
	if r.Clicks, err = getInt(ctx, d.rdb, k.clicks); err != nil {
		return r, fmt.Errorf("read the clicks handled: %w", err)
	}
	counts, err := d.rdb.HVals(ctx, k.orders).Result()
	if err != nil {
		return r, fmt.Errorf("read the orders: %w", err)
	}
	for _, c := range counts {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			return r, fmt.Errorf("read the orders: bad count %q: %w", c, err)
		}
		r.Buyers++
		r.Duplicates += n - 1
	}

	if want := int64(d.cfg.totalClicks()); r.Clicks != want || int64(r.Outcomes.total()) != want {
		return r, fmt.Errorf("%d clicks were to be made; Redis counted %d, the workers %d", want, r.Clicks, r.Outcomes.total())
	}
	if int64(r.Outcomes.Bought) != r.Sold {
		return r, fmt.Errorf("the workers placed %d orders; Redis counted %d", r.Outcomes.Bought, r.Sold)
	}
	return r, nil
}

// getInt reads an integer key; a missing key reads as 0.
func getInt(ctx context.Context, rdb *redis.Client, key string) (int64, error) {
	n, err := rdb.Get(ctx, key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// percentile returns the p-quantile of d (nearest rank), sorting d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(float64(len(d))*p)) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// progress draws a progress line on stderr: redrawn in place on a terminal,
// written once at the end otherwise.
type progress struct {
	w     io.Writer
	live  bool
	label string
	total int64
}

func newProgress(w io.Writer, label string, total int64) *progress {
	p := &progress{w: w, live: isTerminal(w), label: label, total: total}
	p.show(0)
	return p
}

const barWidth = 30

func (p *progress) line(done int64) string {
	done = min(max(done, 0), p.total)
	fill := int(done * barWidth / max(p.total, 1))
	bar := strings.Repeat("=", fill)
	if fill < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-fill-1)
	}
	return fmt.Sprintf("  %-7s [%s] %*d/%d clicks", p.label, bar, len(strconv.FormatInt(p.total, 10)), done, p.total)
}

func (p *progress) show(done int64) {
	if p.live {
		fmt.Fprint(p.w, "\r"+p.line(done))
	}
}

func (p *progress) finish(wall time.Duration) {
	if p.live {
		fmt.Fprint(p.w, "\r")
	}
	fmt.Fprintf(p.w, "%s in %v\n", p.line(p.total), wall.Round(time.Millisecond))
}

// abandon ends a live progress line that will not be finished.
func (p *progress) abandon() {
	if p.live {
		fmt.Fprintln(p.w)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// printResults writes the table of results, a verdict per strategy and why
// each strategy did what it did.
func printResults(w io.Writer, cfg demoConfig, results []saleResult) error {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\tsold\toversold\tduplicate orders\tfinal stock\twall time\torders/s\tclicks/s\tclick p50/p99")
	for _, r := range results {
		secs := r.Wall.Seconds()
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%.0f\t%.0f\t%v / %v\n",
			r.Strategy, r.Sold, r.Oversold(), r.Duplicates, r.FinalStock, r.Wall.Round(time.Millisecond),
			float64(r.Sold)/secs, float64(r.Clicks)/secs, roundLatency(r.P50), roundLatency(r.P99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	for _, r := range results {
		fmt.Fprintf(w, "%-7s %s\n", r.Strategy, verdict(r))
	}

	fmt.Fprintln(w, "\nWhy:")
	for _, r := range results {
		fmt.Fprintf(w, "  %-7s %s\n", r.Strategy, explain(r.Strategy, cfg))
	}
	return nil
}

func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

// verdict says in a few words whether a sale was right, and if not how not.
func verdict(r saleResult) string {
	if r.Exact() {
		return fmt.Sprintf("exact: %d sold, %d left, one order per buyer", r.Sold, r.FinalStock)
	}
	var parts []string
	if n := r.Oversold(); n > 0 {
		parts = append(parts, fmt.Sprintf("oversold by %d", n))
	}
	if r.Duplicates > 0 {
		parts = append(parts, fmt.Sprintf("%d duplicate orders", r.Duplicates))
	}
	if n := r.LostDecrements(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d sales missing from the stock", n))
	}
	if r.FinalStock < 0 {
		parts = append(parts, fmt.Sprintf("stock went to %d", r.FinalStock))
	}
	return strings.Join(parts, ", ")
}

func explain(strategy string, cfg demoConfig) string {
	switch strategy {
	case strategyNoLock:
		return "read the stock, wait, write stock-1: clicks that read the same stock overwrite each\n" +
			"          other's decrement, and a buyer's simultaneous clicks all pass the \"no order yet\" check."
	case strategyLocal:
		others := "other processes"
		if cfg.procs == 2 {
			others = "other process"
		}
		if cfg.procs == 1 {
			return "a sync.Mutex orders the goroutines of its own process, and here there is only one process."
		}
		return fmt.Sprintf("a sync.Mutex orders the goroutines of its own process only: the %d %s\n"+
			"          still read and write the same stock at the same time.", cfg.procs-1, others)
	case strategyDlock:
		return "a dlock Mutex per buyer makes \"check for an order, then order\" one step across all\n" +
			"          processes, and one on the voucher does the same for \"read the stock, then write it\"."
	case strategyScript:
		return "one script (package stock) checks the stock and the buyer, deducts and records the order\n" +
			"          in one step inside Redis: no lock, no wait, one round trip per click."
	}
	return ""
}

// scriptSales returns the stock package's Sales with the keys of the script
// strategy under prefix (order ids included, so that the run's clean-up
// removes them).
func scriptSales(rdb redis.UniversalClient, prefix string) (*stock.Sales, *idgen.Generator, error) {
	ids, err := idgen.New(rdb, "order", idgen.WithPrefix(prefix+"ids:"))
	if err != nil {
		return nil, nil, err
	}
	sales, err := stock.New(rdb, ids, stock.WithPrefix(prefix))
	return sales, ids, err
}
