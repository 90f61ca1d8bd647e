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
	"github.com/dlock-go/dlock/lockhttp"
	"github.com/redis/go-redis/v9"
)

// Environment of a worker process.
const (
	envWorker = "IDEM_TEST_WORKER" // the Redis address; TestMain runs the worker when set
	// envMode says what the worker serves: its handler never returns
	// ("hang"), or it counts its runs in Redis (anything else). With the
	// prefix "lockhttp-" the handler runs under lockhttp.Handler, which
	// refuses a request whose lock is held (NoWait), with a lock TTL of
	// workerLockTTL.
	envMode = "IDEM_TEST_MODE"
)

// TTLs of a worker process: of the lock that guards a key (its lease), and
// of the lock lockhttp takes per request (in the "lockhttp-" modes).
const (
	workerKeyTTL  = time.Second
	workerLockTTL = 4 * time.Second
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(envWorker); addr != "" {
		os.Exit(worker(addr))
	}
	redistest.Main(m, 1)
}

// worker serves a guarded handler, with a key TTL of workerKeyTTL, prints
// its address, and serves until it is killed. The handler is described by
// envMode.
func worker(addr string) int {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := dlock.New(rdb)
	if err != nil {
		return 2
	}
	s, err := idempotency.New(c, rdb, idempotency.WithLeaseTTL(workerKeyTTL))
	if err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 2
	}
	fmt.Println(ln.Addr().String())
	mode := os.Getenv(envMode)
	h := countingHandler(rdb)
	if strings.HasSuffix(mode, "hang") {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rdb.Incr(r.Context(), "started")
			select {} // a handler that hangs until the process dies
		})
	}
	if strings.HasPrefix(mode, "lockhttp-") {
		h = lockhttp.Handler(c, byPath, h, lockhttp.NoWait(), lockhttp.LockOptions(dlock.WithTTL(workerLockTTL)))
	}
	_ = http.Serve(ln, s.Middleware(h))
	return 1
}

// byPath names a request's lock after its path.
func byPath(r *http.Request) (string, error) { return "path:" + r.URL.Path, nil }

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
	// Until the first runs its handler (200ms), not a guess at how long
	// that takes to start.
	for deadline := time.Now().Add(5 * time.Second); runs.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never ran the handler")
		}
	}
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
	url := server(t, srv.Client(t), orderHandler(&runs, 2*time.Second), idempotency.WithoutWaiting())
	first := make(chan reply, 1)
	go func() { first <- post(t, url, "k", "a") }()
	// The duplicate is sent once the first request's handler runs (it
	// holds the key), however loaded the machine.
	for deadline := time.Now().Add(5 * time.Second); runs.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never ran the handler")
		}
	}
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

// TestCrashUnderLockhttp: the two packages as a service composes them,
// Middleware around lockhttp.Handler, in a process killed with SIGKILL
// mid-request. The key's lease (workerKeyTTL) ends before the request's lock
// (workerLockTTL): a retry with the key, sent to another process, then
// reaches lockhttp, which answers 409 with Retry-After while the lock is
// held. That answer is not stored: once the lock's lease has ended, the same
// key runs the handler, and its response is the one replayed.
func TestCrashUnderLockhttp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	locks, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locks.Close() })
	dying, url0 := startWorker(t, srv.Addr, "lockhttp-hang")
	_, url1 := startWorker(t, srv.Addr, "lockhttp-serve")
	go func() { // never answered: the process dies
		req, _ := http.NewRequest(http.MethodPost, url0+"/order", strings.NewReader("a"))
		req.Header.Set(idempotency.Header, "k")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); rdb.Get(ctx, "started").Val() != "1"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker's handler did not start")
		}
	}
	if err := dying.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		st, err := locks.Inspect(ctx, dlock.KindMutex, "path:/order")
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Holders) > 0
	}

	// The retry waits for the key's lease, then finds the request's lock
	// still held by the dead process.
	r := post(t, url1, "k", "a")
	if !held() {
		t.Fatal("the request's lock was free when the retry was answered; the test needs the key's lease to end first")
	}
	if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" || r.replayed {
		t.Errorf("retry while the lock is held: %d, Retry-After %q, replayed %v; want lockhttp's 409 with Retry-After", r.status, r.header.Get("Retry-After"), r.replayed)
	}
	for deadline := time.Now().Add(3 * workerLockTTL); held(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the dead process's lock was never freed")
		}
	}
	if r := post(t, url1, "k", "a"); r.status != http.StatusCreated || r.replayed || r.body != "order 1" {
		t.Errorf("retry after the lock's lease ended: %d %q, replayed %v; want the handler run (201 \"order 1\")", r.status, r.body, r.replayed)
	}
	if r := post(t, url1, "k", "a"); r.status != http.StatusCreated || !r.replayed || r.body != "order 1" {
		t.Errorf("the next retry: %d %q, replayed %v; want 201 \"order 1\" replayed", r.status, r.body, r.replayed)
	}
	if n, _ := rdb.Get(ctx, "runs").Int64(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// TestWhatIsStored: a response is stored, and replayed to every later
// request with its key, when it is an answer; it is not when it asks the
// client to try again (5xx, 408, 409, 425, 429, or any Retry-After): the
// next request with the key runs the handler.
func TestWhatIsStored(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var runs atomic.Int64
	// The handler answers the status in its path, with Retry-After if
	// asked.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/"), &code)
		if r.URL.Query().Has("retry-after") {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(code)
		fmt.Fprint(w, "answer")
	})
	url := server(t, srv.Client(t), h)
	for _, tc := range []struct {
		path   string
		stored bool
	}{
		{"/200", true},
		{"/201", true},
		{"/204", true},
		{"/303", true}, // the outcome of a POST that made something
		{"/400", true},
		{"/404", true},
		{"/422", true},
		{"/408", false},
		{"/409", false},
		{"/425", false},
		{"/429", false},
		{"/202?retry-after", false},
		{"/403?retry-after", false},
		{"/500", false},
		{"/503", false},
	} {
		before := runs.Load()
		replies := make([]*http.Response, 2)
		for i := range replies {
			req, _ := http.NewRequest(http.MethodPost, url+tc.path, nil)
			req.Header.Set(idempotency.Header, "key"+tc.path)
			resp, err := noRedirects.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			replies[i] = resp
		}
		ran := runs.Load() - before
		replayed := replies[1].Header.Get(idempotency.ReplayedHeader) == "true"
		if replies[1].StatusCode != replies[0].StatusCode {
			t.Errorf("%s: statuses %d then %d", tc.path, replies[0].StatusCode, replies[1].StatusCode)
		}
		switch {
		case tc.stored && (ran != 1 || !replayed):
			t.Errorf("%s: the handler ran %d times for 2 requests, the second replayed: %v; want it stored and replayed", tc.path, ran, replayed)
		case !tc.stored && (ran != 2 || replayed):
			t.Errorf("%s: the handler ran %d times for 2 requests, the second replayed: %v; want it not stored, run again", tc.path, ran, replayed)
		}
	}
}

// noRedirects is an HTTP client that returns a redirect as it is.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

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
		if ttl := rdb.PTTL(context.Background(), k).Val(); ttl != -2*time.Nanosecond && (ttl <= 0 || ttl > 300*time.Millisecond) { // -2: expired since listed
			t.Errorf("key %s: TTL %v, want at most the keep time", k, ttl)
		}
	}
}

// TestBadInput: bad arguments get an error, and Middleware a handler that
// answers every request with 500 and the error; nothing panics, and nothing
// is written to Redis.
func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var nilRedis *redis.Client
	for _, tc := range []struct {
		what  string
		locks *dlock.Client
		rdb   redis.UniversalClient
		opts  []idempotency.Option
	}{
		{"a nil dlock Client", nil, rdb, nil},
		{"a zero dlock Client", new(dlock.Client), rdb, nil},
		{"a nil Redis client", c, nil, nil},
		{"a typed-nil Redis client", c, nilRedis, nil},
		{"a nil Option", c, rdb, []idempotency.Option{nil}},
		{"WithKeep(0)", c, rdb, []idempotency.Option{idempotency.WithKeep(0)}},
		{"WithKeep(-1s)", c, rdb, []idempotency.Option{idempotency.WithKeep(-time.Second)}},
		{"WithLeaseTTL(1ms)", c, rdb, []idempotency.Option{idempotency.WithLeaseTTL(time.Millisecond)}},
		{"WithLeaseTTL(-1s)", c, rdb, []idempotency.Option{idempotency.WithLeaseTTL(-time.Second)}},
		{"WithPrefix(\"{\")", c, rdb, []idempotency.Option{idempotency.WithPrefix("{")}},
	} {
		if s, err := idempotency.New(tc.locks, tc.rdb, tc.opts...); err == nil || s != nil {
			t.Errorf("New with %s: %v, %v; want an error", tc.what, s, err)
		}
	}

	s, err := idempotency.New(c, rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ran := false
	ok := func(context.Context) ([]byte, bool, error) { ran = true; return nil, true, nil }
	var nilStore *idempotency.Store
	for _, tc := range []struct {
		what string
		do   func() (idempotency.Result, error)
	}{
		{"an empty key", func() (idempotency.Result, error) { return s.Do(ctx, "", "fp", ok) }},
		{"an oversized key", func() (idempotency.Result, error) {
			return s.Do(ctx, strings.Repeat("k", idempotency.MaxKeyLen+1), "fp", ok)
		}},
		{"an empty fingerprint", func() (idempotency.Result, error) { return s.Do(ctx, "k", "", ok) }},
		{"a nil function", func() (idempotency.Result, error) { return s.Do(ctx, "k", "fp", nil) }},
		//nolint:staticcheck // a nil context is the bad input under test
		{"a nil context", func() (idempotency.Result, error) { return s.Do(nil, "k", "fp", ok) }},
		{"a nil Store", func() (idempotency.Result, error) { return nilStore.Do(ctx, "k", "fp", ok) }},
		{"a zero Store", func() (idempotency.Result, error) { return new(idempotency.Store).Do(ctx, "k", "fp", ok) }},
	} {
		if _, err := tc.do(); err == nil {
			t.Errorf("Do with %s succeeded", tc.what)
		}
	}
	if ran {
		t.Error("a Do with bad input ran its function")
	}

	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true })
	for _, tc := range []struct {
		what string
		mw   func() http.Handler
	}{
		{"a nil Store", func() http.Handler { return nilStore.Middleware(h) }},
		{"a zero Store", func() http.Handler { return new(idempotency.Store).Middleware(h) }},
		{"a nil handler", func() http.Handler { return s.Middleware(nil) }},
		{"a nil HandlerFunc", func() http.Handler { return s.Middleware(http.HandlerFunc(nil)) }},
		{"a nil *ServeMux", func() http.Handler { return s.Middleware((*http.ServeMux)(nil)) }},
		{"a nil option", func() http.Handler { return s.Middleware(h, nil) }},
		{"MaxBody(-1)", func() http.Handler { return s.Middleware(h, idempotency.MaxBody(-1)) }},
	} {
		w := httptest.NewRecorder()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("Middleware with %s panicked: %v", tc.what, p)
				}
			}()
			req := httptest.NewRequest(http.MethodPost, "/order", strings.NewReader("x"))
			req.Header.Set(idempotency.Header, "mw")
			tc.mw().ServeHTTP(w, req)
		}()
		if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "idempotency") {
			t.Errorf("Middleware with %s answers %d %q; want 500 with the error", tc.what, w.Code, w.Body.String())
		}
	}
	if ran {
		t.Error("a Middleware with bad input ran its handler")
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("bad input wrote %d keys: %v", n, rdb.Keys(ctx, "*").Val())
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
