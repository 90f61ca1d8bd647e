package idgen_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/idgen"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Environment of a worker process: the address of Redis, and how many ids
// each of its goroutines prints.
const (
	envWorker = "IDGEN_TEST_WORKER"
	envRedis  = "IDGEN_TEST_REDIS"
)

func TestMain(m *testing.M) {
	if n := os.Getenv(envWorker); n != "" {
		os.Exit(worker(n))
	}
	redistest.Main(m, 1)
}

// worker prints, from each of 4 goroutines sharing one Generator, n ids,
// one per line as "goroutine id".
func worker(arg string) int {
	n, _ := strconv.Atoi(arg)
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	g, err := idgen.New(rdb, "order")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := false
	for w := range 4 {
		wg.Go(func() {
			for range n {
				id, err := g.Next(context.Background())
				mu.Lock()
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					failed = true
					mu.Unlock()
					return
				}
				fmt.Fprintf(out, "%d %d\n", w, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out.Flush()
	if failed {
		return 1
	}
	return 0
}

// TestUniqueAcrossProcesses: 4 processes of 4 goroutines take 2,000 ids
// each: no id twice, each goroutine's ids increasing, and every id's second
// within a second of the run.
func TestUniqueAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	start := time.Now()
	const procs, each = 4, 2000
	cmds := make([]*exec.Cmd, procs)
	outs := make([]strings.Builder, procs)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
		cmds[i].Env = append(os.Environ(), envWorker+"="+strconv.Itoa(each), envRedis+"="+srv.Addr)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], os.Stderr
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int64]bool{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		last := map[string]int64{}
		for line := range strings.SplitSeq(strings.TrimSpace(outs[i].String()), "\n") {
			w, s, _ := strings.Cut(line, " ")
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("worker %d printed %q", i, line)
			}
			if seen[id] {
				t.Errorf("id %d handed out twice", id)
			}
			seen[id] = true
			if id <= last[w] {
				t.Errorf("worker %d goroutine %s: id %d after %d", i, w, id, last[w])
			}
			last[w] = id
			if at := idgen.Second(id); at.Before(start.Truncate(time.Second).Add(-time.Second)) || at.After(time.Now().Add(2*time.Second)) {
				t.Errorf("id %d is of second %v, the run began at %v", id, at, start)
			}
		}
	}
	if len(seen) != procs*4*each {
		t.Errorf("%d distinct ids, want %d", len(seen), procs*4*each)
	}
}

// TestNeverBackwards: the next id is above the last after Redis restarts
// empty within the same second, after the state is lost, and after Redis's
// clock goes back (the stored second set ahead of the clock stands in for
// that: clocks cannot be stepped here).
func TestNeverBackwards(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 5})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	fresh := func() *idgen.Generator {
		g, err := idgen.New(rdb, "order")
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	last, err := fresh().Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string, change func()) {
		t.Helper()
		change()
		id, err := fresh().Next(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if id <= last {
			t.Errorf("%s: id %d after %d", what, id, last)
		}
		last = id
	}
	step("restart without persistence", func() {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	})
	step("state deleted", func() { rdb.Del(ctx, "dlock:idgen:{order}") })
	ahead := time.Now().Unix() - idgen.Epoch.Unix() + 100
	step("clock 100s behind the stored second", func() { rdb.HSet(ctx, "dlock:idgen:{order}", "s", ahead, "n", 7) })
	if s := idgen.Second(last); s.Unix() != idgen.Epoch.Unix()+ahead || idgen.Sequence(last) != 7 {
		t.Errorf("after the clock went back, id %d is of %v, sequence %d: want the stored second, sequence 7", last, s, idgen.Sequence(last))
	}
	step("a second's sequences used up", func() { rdb.HSet(ctx, "dlock:idgen:{order}", "n", int64(idgen.MaxBlock)-10) })
	if s := idgen.Second(last); s.Unix() != idgen.Epoch.Unix()+ahead+1 {
		t.Errorf("after the sequences ran out, id %d is of %v: want the next second", last, s)
	}
	if ttl := rdb.TTL(ctx, "dlock:idgen:{order}").Val(); ttl <= 0 || ttl > 24*time.Hour {
		t.Errorf("state TTL %v, want at most a day", ttl)
	}
}

// TestLostReply: a reservation whose reply is lost runs again when go-redis
// retries it: the first block is skipped, no id is handed out twice.
func TestLostReply(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	g, err := idgen.New(rdb, "order", idgen.WithBlock(10))
	if err != nil {
		t.Fatal(err)
	}
	other, err := idgen.New(srv.Client(t), "order", idgen.WithBlock(10))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for range 5 {
		id, err := g.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	lost := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("EVALSHA"), Fault: faultproxy.DropReply, Times: 1})
	for range 20 {
		for _, gen := range []*idgen.Generator{g, other} {
			id, err := gen.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	if lost.Hits() != 1 {
		t.Fatalf("the fault hit %d requests", lost.Hits())
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != 45 {
		t.Errorf("ids handed out twice: %v", ids)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		id   string
		opts []idgen.Option
	}{
		{"nil client", nil, "x", nil},
		{"empty name", rdb, "", nil},
		{"zero block", rdb, "x", []idgen.Option{idgen.WithBlock(0)}},
		{"block too large", rdb, "x", []idgen.Option{idgen.WithBlock(idgen.MaxBlock + 1)}},
		{"nil option", rdb, "x", []idgen.Option{nil}},
	} {
		if _, err := idgen.New(tc.rdb, tc.id, tc.opts...); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
	var g *idgen.Generator
	if _, err := g.Next(context.Background()); err == nil {
		t.Error("Next of a nil Generator succeeded")
	}
	g, _ = idgen.New(rdb, "x")
	//nolint:staticcheck // a nil context is the bad input under test
	if _, err := g.Next(nil); err == nil {
		t.Error("Next(nil) succeeded")
	}
	srv.Kill()
	if _, err := g.Next(context.Background()); err == nil || !strings.Contains(err.Error(), `reserve ids of "x"`) {
		t.Errorf("Next with Redis down: %v, want an error that says what was being done", err)
	}
}
