package idempotency_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/idempotency"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Environment of a worker process.
const (
	envWorker = "IDEM_TEST_WORKER" // the Redis address; TestMain runs the worker when set
	envMode   = "IDEM_TEST_MODE"   // "hang": its handler never returns; else it counts its runs in Redis
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(envWorker); addr != "" {
		os.Exit(worker(addr))
	}
	redistest.Main(m, 1)
}

// worker serves a guarded handler, with a lease TTL of 1s, prints its
// address, and serves until it is killed. The handler never returns (mode
// "hang"), or is countingHandler.
func worker(addr string) int {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := dlock.New(rdb)
	if err != nil {
		return 2
	}
	s, err := idempotency.New(c, rdb, idempotency.WithLeaseTTL(time.Second))
	if err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 2
	}
	fmt.Println(ln.Addr().String())
	h := s.Middleware(countingHandler(rdb))
	if os.Getenv(envMode) == "hang" {
		h = s.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rdb.Incr(r.Context(), "started")
			select {} // a handler that hangs until the process dies
		}))
	}
	_ = http.Serve(ln, h)
	return 1
}

// server serves h guarded by a Store of its own dlock Client, as one process
// of a service would, and returns its URL.
func server(t *testing.T, rdb *redis.Client, h http.Handler, opts ...idempotency.Option) string {
	t.Helper()
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := idempotency.New(c, rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Middleware(h))
	t.Cleanup(ts.Close)
	return ts.URL
}

type reply struct {
	status   int
	body     string
	replayed bool
	header   http.Header
}

func post(t *testing.T, url, key, body string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/order", strings.NewReader(body))
	if key != "" {
		req.Header.Set(idempotency.Header, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST: %v", err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, string(b), resp.Header.Get(idempotency.ReplayedHeader) == "true", resp.Header}
}

// orderHandler counts its runs and answers 201 with the run's number, after
// a pause long enough for duplicates to come while it runs.
func orderHandler(runs *atomic.Int64, pause time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(pause)
		w.Header().Set("X-Run", fmt.Sprint(n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", n)
	})
}

// TestDuplicates: 20 submissions with one key, at once, to two servers
// (two Clients, as two processes would have): the handler runs once, every
// submission gets its response (status, header, body), and all but one are
// replayed. A later one is replayed at once.
func TestDuplicates(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var runs atomic.Int64
	urls := []string{
		server(t, srv.Client(t), orderHandler(&runs, 100*time.Millisecond)),
		server(t, srv.Client(t), orderHandler(&runs, 100*time.Millisecond)),
	}
	var wg sync.WaitGroup
	replies := make([]reply, 20)
	for i := range replies {
		wg.Go(func() { replies[i] = post(t, urls[i%2], "k1", `{"sku":42}`) })
	}
	wg.Wait()
	replayed := 0
	for _, r := range replies {
		if r.status != http.StatusCreated || r.body != "order 1" || r.header.Get("X-Run") != "1" {
			t.Errorf("reply %+v, want 201 \"order 1\"", r)
		}
		if r.replayed {
			replayed++
		}
	}
	if runs.Load() != 1 || replayed != 19 {
		t.Errorf("the handler ran %d times, %d replies replayed; want 1 and 19", runs.Load(), replayed)
	}
	if r := post(t, urls[0], "k1", `{"sku":42}`); !r.replayed || r.body != "order 1" {
		t.Errorf("a later duplicate: %+v", r)
	}
	if r := post(t, urls[0], "k2", `{"sku":42}`); r.replayed || r.body != "order 2" {
		t.Errorf("another key: %+v", r)
	}
}

// countingHandler counts its runs in Redis, in every process, and answers
// 201 with the run's number after a pause long enough for duplicates to come
// while it runs.
func countingHandler(rdb *redis.Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rdb.Incr(r.Context(), "runs").Val()
		time.Sleep(100 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", n)
	})
}

// startWorker starts a worker process in mode and returns its URL.
func startWorker(t *testing.T, redisAddr, mode string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+redisAddr, envMode+"="+mode)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return cmd, "http://" + strings.TrimSpace(line)
}

// TestDuplicatesAcrossProcesses: 12 submissions with one key, at once, half
// to a server in another OS process and half to one here: the handler runs
// once in all, and every submission gets its response.
func TestDuplicatesAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	_, there := startWorker(t, srv.Addr, "serve")
	here := server(t, rdb, countingHandler(rdb), idempotency.WithLeaseTTL(time.Second))
	var wg sync.WaitGroup
	replies := make([]reply, 12)
	for i := range replies {
		u := here
		if i%2 == 1 {
			u = there
		}
		wg.Go(func() { replies[i] = post(t, u, "k", `{"sku":7}`) })
	}
	wg.Wait()
	for _, r := range replies {
		if r.status != http.StatusCreated || r.body != "order 1" {
			t.Errorf("reply %+v, want 201 \"order 1\"", r)
		}
	}
	if n := rdb.Get(context.Background(), "runs").Val(); n != "1" {
		t.Errorf("the handler ran %s times across the two processes, want 1", n)
	}
}

// TestMismatch: the key sent again with another body, while the first runs
// and after, gets 422; the handler runs once.
func TestMismatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var runs atomic.Int64
	url := server(t, srv.Client(t), orderHandler(&runs, 200*time.Millisecond))
	first := make(chan reply, 1)
	go func() { first <- post(t, url, "k", "a") }()
	time.Sleep(50 * time.Millisecond)
	if r := post(t, url, "k", "b"); r.status != http.StatusUnprocessableEntity {
		t.Errorf("another body while the first runs: %d", r.status)
	}
	if r := <-first; r.status != http.StatusCreated {
		t.Errorf("first: %+v", r)
	}
	if r := post(t, url, "k", "b"); r.status != http.StatusUnprocessableEntity {
		t.Errorf("another body after: %d", r.status)
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times", runs.Load())
	}
}

// TestInProgress: a Store made WithoutWaiting answers a duplicate that comes
// while the first runs with 409 and Retry-After.
func TestInProgress(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var runs atomic.Int64
	url := server(t, srv.Client(t), orderHandler(&runs, 300*time.Millisecond), idempotency.WithoutWaiting())
	first := make(chan reply, 1)
	go func() { first <- post(t, url, "k", "a") }()
	time.Sleep(100 * time.Millisecond)
	r := post(t, url, "k", "a")
	if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" {
		t.Errorf("duplicate while the first runs: %d, Retry-After %q; want 409 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	<-first
	if r := post(t, url, "k", "a"); r.status != http.StatusCreated || !r.replayed {
		t.Errorf("duplicate after: %+v", r)
	}
}

// TestCrashedHandler: a process whose handler hangs is killed with SIGKILL
// mid-request; a duplicate sent to another process waits until the key's
// lease (1s) runs out, then runs.
func TestCrashedHandler(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	cmd, url0 := startWorker(t, srv.Addr, "hang")
	go func() { // never answered: the process dies
		req, _ := http.NewRequest(http.MethodPost, url0+"/order", strings.NewReader("a"))
		req.Header.Set(idempotency.Header, "k")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Get(context.Background(), "started").Val() != "1" {
		if time.Now().After(deadline) {
			t.Fatal("the worker's handler did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var runs atomic.Int64
	url := server(t, rdb, orderHandler(&runs, 0))
	r := post(t, url, "k", "a")
	took := time.Since(killed)
	if r.status != http.StatusCreated || r.replayed || runs.Load() != 1 {
		t.Errorf("duplicate after the crash: %+v, %d runs; want it run here", r, runs.Load())
	}
	if took < 500*time.Millisecond || took > 3*time.Second {
		t.Errorf("the duplicate ran %v after the crash; the lease is 1s", took)
	}
	t.Logf("the duplicate ran %v after the process running the key was killed", took.Round(time.Millisecond))
}

// TestKeysAndBodies: without a key the request passes through (or gets 400
// with RequireKey); an oversized key 400; an oversized body 413; a 5xx
// response is not stored; a stored response expires.
func TestKeysAndBodies(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var runs atomic.Int64
	fail := atomic.Bool{}
	fail.Store(true)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		if fail.Swap(false) {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "run %d", n)
	})
	c, _ := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	s, err := idempotency.New(c, rdb, idempotency.WithKeep(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	open := httptest.NewServer(s.Middleware(h, idempotency.MaxBody(10)))
	t.Cleanup(open.Close)
	strict := httptest.NewServer(s.Middleware(h, idempotency.RequireKey()))
	t.Cleanup(strict.Close)

	if r := post(t, open.URL, "k", "x"); r.status != http.StatusServiceUnavailable {
		t.Fatalf("first run: %+v", r)
	}
	if r := post(t, open.URL, "k", "x"); r.status != http.StatusOK || r.replayed || r.body != "run 2" {
		t.Errorf("after a 503, the key runs again: %+v", r)
	}
	if r := post(t, open.URL, "k", "x"); !r.replayed || r.body != "run 2" {
		t.Errorf("then it is replayed: %+v", r)
	}
	time.Sleep(400 * time.Millisecond)
	if r := post(t, open.URL, "k", "x"); r.replayed || r.body != "run 3" {
		t.Errorf("after the stored response expired: %+v", r)
	}
	if r := post(t, open.URL, "", "x"); r.status != http.StatusOK || r.body != "run 4" {
		t.Errorf("no key, passed through: %+v", r)
	}
	if r := post(t, strict.URL, "", "x"); r.status != http.StatusBadRequest {
		t.Errorf("no key with RequireKey: %d", r.status)
	}
	if r := post(t, open.URL, strings.Repeat("k", idempotency.MaxKeyLen+1), "x"); r.status != http.StatusBadRequest {
		t.Errorf("oversized key: %d", r.status)
	}
	if r := post(t, open.URL, "big", strings.Repeat("b", 11)); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d", r.status)
	}
	if runs.Load() != 4 {
		t.Errorf("the handler ran %d times, want 4", runs.Load())
	}
	for _, k := range rdb.Keys(context.Background(), "dlock:idem:*").Val() {
		if ttl := rdb.PTTL(context.Background(), k).Val(); ttl <= 0 || ttl > 300*time.Millisecond {
			t.Errorf("key %s: TTL %v, want at most the keep time", k, ttl)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, _ := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	if _, err := idempotency.New(nil, rdb); err == nil {
		t.Error("New without a dlock Client succeeded")
	}
	if _, err := idempotency.New(c, nil); err == nil {
		t.Error("New without Redis succeeded")
	}
	for _, o := range []idempotency.Option{idempotency.WithKeep(0), idempotency.WithLeaseTTL(time.Millisecond), idempotency.WithPrefix("{"), nil} {
		if _, err := idempotency.New(c, rdb, o); err == nil {
			t.Error("a bad option was accepted")
		}
	}
	s, _ := idempotency.New(c, rdb)
	ctx := context.Background()
	ok := func(context.Context) ([]byte, bool, error) { return nil, true, nil }
	if _, err := s.Do(ctx, "", "fp", ok); err == nil {
		t.Error("an empty key was accepted")
	}
	if _, err := s.Do(ctx, "k", "fp", nil); err == nil {
		t.Error("a nil function was accepted")
	}
	//nolint:staticcheck // a nil context is the bad input under test
	if _, err := s.Do(nil, "k", "fp", ok); err == nil {
		t.Error("a nil context was accepted")
	}
	var zero *idempotency.Store
	if _, err := zero.Do(ctx, "k", "fp", ok); err == nil {
		t.Error("Do of a nil Store succeeded")
	}
}

// TestLostReplies: the replies of the claim and of the stored response are
// lost once each, and go-redis sends them again: the retried claim finds the
// key claimed with its own fingerprint and goes on, the retried store finds
// its own response stored; the handler runs once and its caller is told it
// ran (not that it was replayed); the next call replays it.
func TestLostReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := idempotency.New(c, rdb, idempotency.WithPrefix("idem-test:"))
	if err != nil {
		t.Fatal(err)
	}
	claim := p.Inject(faultproxy.Rule{Match: faultproxy.And(faultproxy.CommandIs("set"), faultproxy.HasArg("idem-test:{k}:fp")), Fault: faultproxy.DropReply, Times: 1})
	store := p.Inject(faultproxy.Rule{Match: faultproxy.And(faultproxy.CommandIs("set"), faultproxy.HasArg("idem-test:{k}:resp")), Fault: faultproxy.DropReply, Times: 1})
	var runs atomic.Int64
	fn := func(context.Context) ([]byte, bool, error) {
		runs.Add(1)
		return []byte("order 1"), true, nil
	}
	r, err := s.Do(ctx, "k", "fp-1", fn)
	if err != nil {
		t.Fatal(err)
	}
	if claim.Hits() != 1 || store.Hits() != 1 {
		t.Fatalf("faults hit the claim %d and the store %d times, want once each", claim.Hits(), store.Hits())
	}
	if runs.Load() != 1 || r.Replayed || string(r.Response) != "order 1" || r.Fence == 0 {
		t.Errorf("first call: %d runs, result %+v; want one run, not replayed, with its fence", runs.Load(), r)
	}
	r, err = s.Do(ctx, "k", "fp-1", fn)
	if err != nil || !r.Replayed || string(r.Response) != "order 1" || runs.Load() != 1 {
		t.Errorf("second call: %+v, %v, %d runs; want the first response replayed", r, err, runs.Load())
	}
}
