package redistest

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// The environment variables Main sets for a package's examples.
const (
	// EnvAddr holds the address of the server the examples use.
	EnvAddr = "REDIS_ADDR"
	// EnvRedLockAddrs holds the comma-separated addresses of the independent
	// servers a RedLock example uses.
	EnvRedLockAddrs = "REDLOCK_ADDRS"
)

// IgnoreDialProbe is the goroutine go-redis leaves behind after failed
// dials: it probes the server, sleeping a second between tries, and sees a
// closed pool only then. It is not a leak.
var IgnoreDialProbe = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// Main runs a test binary's tests and examples (m.Run) and exits with their
// outcome. With servers > 0 it first starts that many redis-server processes
// for the examples, whose output is checked, so they need a real server: the
// first one's address is in REDIS_ADDR and, with servers > 1, every one's in
// REDLOCK_ADDRS. They are stopped once the run ends. A run that passed fails
// if it left goroutines running (IgnoreDialProbe and opts excepted).
// go-redis's log is kept out of the output; a run that failed prints its
// last lines. Unless -parallel is given, parallel tests run 8 at a time with
// -short and 4 without (README's command), not one per CPU: they mostly wait
// for servers, TTLs and faults, not for a CPU.
func Main(m *testing.M, servers int, opts ...goleak.Option) {
	os.Exit(run(m, servers, opts))
}

func run(m *testing.M, servers int, opts []goleak.Option) int {
	rlog := quietRedis()
	var started []*Server
	stop := func() {
		for _, s := range started {
			_ = s.Close()
		}
		started = nil
	}
	defer stop()
	if servers > 0 {
		dir, err := os.MkdirTemp("", "redistest-examples-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "redistest:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		addrs := make([]string, 0, servers)
		for range servers {
			s, err := Launch(dir)
			if err != nil {
				fmt.Fprintln(os.Stderr, "redistest: the examples' server:", err)
				return 1
			}
			started = append(started, s)
			addrs = append(addrs, s.Addr)
		}
		os.Setenv(EnvAddr, addrs[0])
		if servers > 1 {
			os.Setenv(EnvRedLockAddrs, strings.Join(addrs, ","))
		}
	}
	defaultParallel()
	code := m.Run()
	stop() // before the search for leaks: each server has a goroutine waiting for it
	if code != 0 {
		rlog.dump(os.Stderr)
		return code
	}
	if err := goleak.Find(append([]goleak.Option{IgnoreDialProbe}, opts...)...); err != nil {
		fmt.Fprintln(os.Stderr, "goleak: errors on successful test run:", err)
		return 1
	}
	return 0
}

// defaultParallel sets -test.parallel, if the command line did not: 8 with
// -short, else 4.
func defaultParallel() {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		return
	}
	n := "4"
	if testing.Short() {
		n = "8"
	}
	_ = flag.Set("test.parallel", n)
}
