package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestMain runs the demo's workers: the demo starts its own executable again
// as a worker, which in a test is this test binary. Marked by workerEnv, it
// then behaves exactly as the dlock command.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		main()
	}
	redis.SetLogger(discardLogger{}) // as run does: tests that call parts of it get no log noise either
	redistest.Main(m, 0)
}

// smallSale is a sale small enough for a test under -race, with every
// strategy.
func smallSale(redisURL string) demoConfig {
	return demoConfig{
		redisURL: redisURL, vouchers: 20, buyers: 150, clicks: 3,
		procs: 3, workers: 4, work: time.Millisecond, strategies: allStrategies,
	}
}

func TestSale(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cfg := smallSale("redis://" + srv.Addr)
	var stdout, stderr bytes.Buffer
	results, err := runSale(t.Context(), cfg, &stdout, &stderr)
	if err != nil {
		t.Fatalf("runSale: %v\nstderr:\n%s", err, &stderr)
	}

	var got []string
	for _, r := range results {
		got = append(got, r.Strategy)
		t.Logf("%-7s %s", r.Strategy, verdict(r))
		if want := int64(cfg.totalClicks()); r.Clicks != want {
			t.Errorf("%s: %d clicks handled, want %d", r.Strategy, r.Clicks, want)
		}
	}
	if !slices.Equal(got, allStrategies) {
		t.Fatalf("strategies run: %v, want %v", got, allStrategies)
	}

	d := results[2]
	if d.Sold != int64(cfg.vouchers) || d.Duplicates != 0 || d.FinalStock != 0 || !d.Exact() {
		t.Errorf("dlock: sold %d, %d duplicate orders, final stock %d; want %d sold, no duplicates, stock 0",
			d.Sold, d.Duplicates, d.FinalStock, cfg.vouchers)
	}
	if d.Buyers != d.Sold {
		t.Errorf("dlock: %d orders from %d buyers, want one order per buyer", d.Sold, d.Buyers)
	}
	if sc := results[3]; sc.Sold != int64(cfg.vouchers) || sc.Duplicates != 0 || sc.FinalStock != 0 || !sc.Exact() || sc.Buyers != sc.Sold {
		t.Errorf("script: sold %d to %d buyers, %d duplicate orders, final stock %d; want %d sold, one per buyer, stock 0",
			sc.Sold, sc.Buyers, sc.Duplicates, sc.FinalStock, cfg.vouchers)
	}
	// With several processes each reading the stock, waiting and writing it,
	// the unlocked sale loses decrements every time.
	if n := results[0]; n.Exact() {
		t.Errorf("nolock sold exactly: %+v", n)
	}

	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		keys := rdb.Keys(t.Context(), "*").Val()
		t.Errorf("%d keys left after the demo: %v", n, keys[:min(len(keys), 10)])
	}
	if strings.Contains(stderr.String(), "private") {
		t.Errorf("started a private Redis although one was given:\n%s", &stderr)
	}
}

func TestRunDemoOutput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"demo", "--redis", "redis://" + srv.Addr,
		"--vouchers", "10", "--buyers", "60", "--procs", "2", "--workers", "3", "--work", "500us"}, nil, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, &stderr)
	}
	out := stdout.String()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, &stderr)
	for _, want := range []string{
		"strategy  sold  oversold  duplicate orders  final stock  wall time  orders/s  clicks/s",
		"dlock   exact: 10 sold, 0 left, one order per buyer",
		"Why:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	for _, s := range allStrategies {
		row := regexp.MustCompile(`(?m)^` + s + `\s+\d+\s+\d+\s+\d+\s+-?\d+\s+\S+\s+\d+\s+\d+\s+\S+ / \S+$`)
		if !row.MatchString(out) {
			t.Errorf("no table row for %s", s)
		}
		if !strings.Contains(stderr.String(), s) || !strings.Contains(stderr.String(), "180/180 clicks in") {
			t.Errorf("no progress line for %s", s)
		}
	}
}

func TestDemoStartsPrivateRedis(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"demo", "--redis", "redis://127.0.0.1:1", "--strategies", "dlock",
		"--vouchers", "5", "--buyers", "20", "--procs", "2", "--workers", "2"}, nil, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, &stderr)
	}
	m := regexp.MustCompile(`no Redis at 127\.0\.0\.1:1; started a private redis-server on (127\.0\.0\.1:\d+)\n`).
		FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("stderr does not tell of the private server:\n%s", &stderr)
	}
	if !strings.Contains(stdout.String(), "dlock   exact: 5 sold") {
		t.Errorf("stdout:\n%s", &stdout)
	}
	if conn, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		conn.Close()
		t.Errorf("the private redis-server at %s still runs after the demo", m[1])
	}
}

func TestDemoWithoutRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(redistest.ServerEnv, "") // no server of any kind
	err := run(t.Context(), []string{"demo", "--redis", "redis://127.0.0.1:1"}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), redistest.InstallHint) {
		t.Fatalf("run without redis-server: %v, want the install hint", err)
	}
	if code := exitCode(err, io.Discard); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
}

func TestDemoRedisRefuses(t *testing.T) {
	t.Parallel()
	srv := requirePassword(t, redistest.Start(t))
	err := run(t.Context(), []string{"demo", "--redis", "redis://" + srv.Addr}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("run against a Redis that wants a password: %v, want NOAUTH", err)
	}
}

// requirePassword makes srv refuse clients that do not authenticate.
// (redistest cannot start a server with --requirepass: it waits for an
// unauthenticated PING to succeed.)
func requirePassword(t *testing.T, srv *redistest.Server) *redistest.Server {
	t.Helper()
	if err := srv.Client(t).ConfigSet(t.Context(), "requirepass", "secret").Err(); err != nil {
		t.Fatalf("set a password: %v", err)
	}
	return srv
}

// TestWorkerFailure has the workers connect to a Redis that refuses them: the
// error names the worker and says what it said.
func TestWorkerFailure(t *testing.T) {
	t.Parallel()
	open := redistest.Start(t)
	closed := requirePassword(t, redistest.Start(t))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallSale("redis://" + open.Addr)
	cfg.procs = 2
	d := &demo{cfg: cfg, rdb: open.Client(t), url: "redis://" + closed.Addr, prefix: "dlock-demo:test:", exe: exe, stderr: io.Discard}
	_, err = d.runStrategy(t.Context(), strategyDlock)
	if err == nil {
		t.Fatal("runStrategy with workers that cannot connect: no error")
	}
	t.Logf("error: %v", err)
	for _, want := range []string{"of 2: exit status 1: dlock demo-worker: connect to Redis", "NOAUTH"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestRedisDiesMidSale kills Redis while the workers buy: the error says
// what a worker was doing when it failed.
func TestRedisDiesMidSale(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallSale("redis://" + srv.Addr)
	cfg.buyers = 100_000 // far longer than the test waits
	d := &demo{cfg: cfg, rdb: srv.Client(t), url: cfg.redisURL, prefix: "dlock-demo:test:", exe: exe, stderr: io.Discard}
	kill := time.AfterFunc(time.Second, func() { _ = srv.Kill() })
	defer kill.Stop()
	_, err = d.runStrategy(t.Context(), strategyDlock)
	t.Logf("error: %v", err)
	if err == nil || !strings.Contains(err.Error(), "exit status 1: dlock demo-worker") {
		t.Fatalf("runStrategy with Redis killed: %v, want a worker's error", err)
	}
}

func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cfg := smallSale("redis://" + srv.Addr)
	cfg.buyers, cfg.work = 100_000, 5*time.Millisecond // far longer than the test waits
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := runSale(ctx, cfg, io.Discard, io.Discard)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("runSale cancelled: %v, want an interruption", err)
	}
	if took := time.Since(start); took > 2*time.Second+stopGrace {
		t.Errorf("runSale took %v to stop", took)
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys left after an interrupted demo", n)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string // in the error; "" for none
	}{
		{[]string{"-h"}, ""},
		{[]string{"help"}, ""},
		{[]string{"demo", "-h"}, ""},
		{[]string{"demo", "--help"}, ""},
		{nil, "no command"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"demo", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"demo", "--procs", "x"}, `invalid value "x" for flag -procs`},
		{[]string{"demo", "--procs", "0"}, "--procs is 0; it must be between 1 and 64"},
		{[]string{"demo", "--procs", "-3"}, "--procs is -3"},
		{[]string{"demo", "--procs", "65"}, "--procs is 65"},
		{[]string{"demo", "--workers", "0"}, "--workers is 0"},
		{[]string{"demo", "--vouchers", "0"}, "--vouchers is 0"},
		{[]string{"demo", "--buyers", "0"}, "--buyers is 0"},
		{[]string{"demo", "--clicks", "0"}, "--clicks is 0"},
		{[]string{"demo", "--buyers", "5000000", "--clicks", "3"}, "--buyers × --clicks is over"},
		{[]string{"demo", "--work", "-1ms"}, "--work is -1ms"},
		{[]string{"demo", "--strategies", "nolock,magic"}, `unknown strategy "magic"`},
		{[]string{"demo", "--strategies", " , "}, "--strategies is empty"},
		{[]string{"demo", "--strategies", "dlock,dlock"}, `"dlock" given twice`},
		{[]string{"demo", "--redis", "http://127.0.0.1"}, "--redis"},
		{[]string{"demo", "now"}, `unexpected argument "now"`},
		{[]string{workerCommand}, "not by hand"},
		{[]string{workerCommand, "-strategy", "dlock", "-keys", "k:", "-locks", "l:",
			"-buyers", "1", "-clicks", "1", "-procs", "2", "-index", "2", "-workers", "1"}, "-index 2"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(t.Context(), tc.args, nil, &stdout, io.Discard)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				if !strings.Contains(stdout.String(), "Usage: dlock") {
					t.Errorf("no usage on stdout:\n%s", &stdout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if code := exitCode(err, io.Discard); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
		})
	}
}

// TestShare checks that the workers' shares make every click once, and put
// the clicks of one buyer in different processes.
func TestShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ buyers, clicks, procs int }{
		{10, 3, 4}, {7, 1, 3}, {5, 4, 2}, {3, 2, 5}, {1, 1, 1},
	} {
		made := make(map[int][]int) // buyer -> the workers that clicked for it
		for p := range tc.procs {
			s := share(tc.buyers, tc.clicks, tc.procs, p)
			if !slices.IsSorted(s) {
				t.Errorf("%+v: share of %d not in buyer order: %v", tc, p, s)
			}
			for _, b := range s {
				made[b] = append(made[b], p)
			}
		}
		for b := range tc.buyers {
			ps := made[b]
			if len(ps) != tc.clicks {
				t.Errorf("%+v: buyer %d clicked %d times, want %d", tc, b, len(ps), tc.clicks)
			}
			slices.Sort(ps)
			if distinct := len(slices.Compact(ps)); distinct != min(tc.clicks, tc.procs) {
				t.Errorf("%+v: buyer %d clicked from %d processes, want %d", tc, b, distinct, min(tc.clicks, tc.procs))
			}
		}
	}
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r    saleResult
		want string
	}{
		{saleResult{Vouchers: 10, Sold: 10, Buyers: 10}, "exact: 10 sold, 0 left, one order per buyer"},
		{saleResult{Vouchers: 10, Sold: 4, Buyers: 4, FinalStock: 6}, "exact: 4 sold, 6 left, one order per buyer"},
		{saleResult{Vouchers: 10, Sold: 15, Buyers: 12, Duplicates: 3},
			"oversold by 5, 3 duplicate orders, 5 sales missing from the stock"},
		{saleResult{Vouchers: 10, Sold: 9, Buyers: 8, Duplicates: 1, FinalStock: 1}, "1 duplicate orders"},
		{saleResult{Vouchers: 10, Sold: 12, Buyers: 12, FinalStock: -2}, "oversold by 2, stock went to -2"},
	} {
		if got := verdict(tc.r); got != tc.want {
			t.Errorf("verdict(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i))
	}
	if p50, p99 := percentile(d, 0.5), percentile(d, 0.99); p50 != 50 || p99 != 99 {
		t.Errorf("p50, p99 of 1..100 = %v, %v; want 50, 99", p50, p99)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile of nothing = %v", got)
	}
}
