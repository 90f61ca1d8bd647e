package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, 0) }

const incrSrc = "return redis.call('INCR', KEYS[1])"

// env is a redis-server, a proxy in front of it and a client that bypasses
// the proxy.
type env struct {
	srv    *redistest.Server
	p      *faultproxy.Proxy
	direct *redis.Client
}

func setup(t *testing.T) env {
	t.Helper()
	srv := redistest.Start(t)
	return env{srv: srv, p: faultproxy.Start(t, srv.Addr), direct: srv.Client(t)}
}

// client returns a go-redis client through the proxy; opt, if given, adjusts
// its options.
func (e env) client(t *testing.T, opt func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: e.p.Addr()}
	if opt != nil {
		opt(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// counter reads an integer key directly from the server.
func (e env) counter(t *testing.T, key string) int {
	t.Helper()
	n, err := e.direct.Get(context.Background(), key).Int()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return n
}

func protocols(t *testing.T, f func(t *testing.T, proto int)) {
	for _, proto := range []int{3, 2} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) { f(t, proto) })
	}
}

func withProto(proto int) func(*redis.Options) {
	return func(o *redis.Options) { o.Protocol = proto }
}

func TestForwarding(t *testing.T) {
	t.Parallel()
	protocols(t, func(t *testing.T, proto int) {
		ctx := context.Background()
		e := setup(t)
		hello3 := e.p.Inject(faultproxy.Rule{Match: faultproxy.And(faultproxy.CommandIs("hello"), faultproxy.HasArg("3"))})
		hgetall := e.p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("HGETALL"), Fault: faultproxy.Pass})
		c := e.client(t, withProto(proto))

		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
		if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("GET = %q, %v; want v", got, err)
		}
		if got, err := e.direct.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("direct GET = %q, %v; want v", got, err)
		}

		var (
			incr  *redis.IntCmd
			get   *redis.StringCmd
			rng   *redis.StringSliceCmd
			null  *redis.StringCmd
			multi = "line1\r\nline2"
		)
		_, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
			pl.Set(ctx, "n", 41, 0)
			incr = pl.Incr(ctx, "n")
			pl.RPush(ctx, "l", "a", multi, "")
			rng = pl.LRange(ctx, "l", 0, -1)
			null = pl.Get(ctx, "missing")
			get = pl.Get(ctx, "n")
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("pipeline: %v", err)
		}
		if incr.Val() != 42 || get.Val() != "42" || !errors.Is(null.Err(), redis.Nil) {
			t.Fatalf("pipeline: INCR=%d GET=%q null=%v", incr.Val(), get.Val(), null.Err())
		}
		if want := []string{"a", multi, ""}; !reflect.DeepEqual(rng.Val(), want) {
			t.Fatalf("LRANGE = %q, want %q", rng.Val(), want)
		}

		if err := c.HSet(ctx, "h", "f1", "v1", "f2", "v2").Err(); err != nil {
			t.Fatalf("HSET: %v", err)
		}
		h, err := c.HGetAll(ctx, "h").Result()
		if want := map[string]string{"f1": "v1", "f2": "v2"}; err != nil || !reflect.DeepEqual(h, want) {
			t.Fatalf("HGETALL = %v, %v; want %v", h, err, want)
		}

		res, err := c.Eval(ctx, "return {1, {2, 'x', {3}}, 'y', {}}", nil).Result()
		want := []any{int64(1), []any{int64(2), "x", []any{int64(3)}}, "y", []any{}}
		if err != nil || !reflect.DeepEqual(res, want) {
			t.Fatalf("EVAL = %#v, %v; want %#v", res, err, want)
		}

		if got := hgetall.Hits(); got != 1 {
			t.Errorf("HGETALL seen %d times, want 1", got)
		}
		// go-redis (this version) runs pipelines on a connection of their
		// own, so there may be more than one; each must have said HELLO 3 in
		// RESP3 and none in RESP2.
		wantHello := 0
		if proto == 3 {
			wantHello = e.p.Accepted()
		}
		if got := hello3.Hits(); got != wantHello || e.p.Accepted() == 0 {
			t.Errorf("HELLO 3 seen %d times on %d connections, want %d", got, e.p.Accepted(), wantHello)
		}
	})
}

// TestFraming feeds every RESP3 type, an attribute and an out-of-band push
// through the proxy from a fake server, and drops the reply to the last of a
// pipeline of inline commands: the client must get exactly the bytes of all
// replies before it, then EOF. A framing mistake moves the cut.
func TestFraming(t *testing.T) {
	t.Parallel()
	push := ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n"
	replies := []string{
		"+OK\r\n",
		"|1\r\n+ttl\r\n:3\r\n$5\r\nhello\r\n",
		push + "%2\r\n+a\r\n*2\r\n:1\r\n_\r\n+b\r\n~1\r\n,3.14\r\n",
		"*3\r\n!5\r\nERR x\r\n=8\r\ntxt:abcd\r\n(12345678901234567890\r\n",
		"*-1\r\n",
		"$-1\r\n",
		"#t\r\n",
		"$0\r\n\r\n",
		"*2\r\n$4\r\na\r\nb\r\n:-1\r\n",
		"-ERR last\r\n",
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var served []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range served {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() { // the fake server: reply i to inline command i
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		served = append(served, c)
		mu.Unlock()
		br := bufio.NewReader(c)
		for _, r := range replies {
			if _, err := br.ReadString('\n'); err != nil {
				return
			}
			half := len(r) / 2 // in two writes, to split values across reads
			if _, err := io.WriteString(c, r[:half]); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
			if _, err := io.WriteString(c, r[half:]); err != nil {
				return
			}
		}
		_, _ = io.Copy(io.Discard, c)
	}()

	p := faultproxy.Start(t, ln.Addr().String())
	last := len(replies) - 1
	in := p.Inject(faultproxy.Rule{
		Match: faultproxy.And(faultproxy.CommandIs("cmd"), faultproxy.HasArg(fmt.Sprint(last))),
		Fault: faultproxy.DropReply,
	})
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var req strings.Builder
	for i := range replies {
		fmt.Fprintf(&req, "cmd  %d\r\n", i)
		if i == 3 {
			req.WriteString("\r\n") // an empty inline command gets no reply
		}
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, got)
	}
	if want := strings.Join(replies[:last], ""); string(got) != want {
		t.Fatalf("client got\n%q\nwant\n%q", got, want)
	}
	if in.Hits() != 1 {
		t.Fatalf("Hits = %d, want 1", in.Hits())
	}
}

// TestRules checks rule order, Times, Remove and Clear, with Pass rules that
// only count.
func TestRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	c := e.client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	get := func() {
		t.Helper()
		if err := c.Get(ctx, "k").Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("GET: %v", err)
		}
	}
	isGet := faultproxy.CommandIs("get")
	first := e.p.Inject(faultproxy.Rule{Match: isGet, Times: 2})
	// A Match may call the proxy.
	second := e.p.Inject(faultproxy.Rule{Match: func(c faultproxy.Command) bool { return e.p.Open() > 0 && isGet(c) }})
	for range 3 {
		get()
	}
	if first.Hits() != 2 || second.Hits() != 1 {
		t.Fatalf("Hits = %d, %d; want 2, 1 (the first rule until its Times run out)", first.Hits(), second.Hits())
	}
	second.Remove()
	get()
	if first.Hits() != 2 || second.Hits() != 1 {
		t.Fatalf("Hits after Remove = %d, %d; want 2, 1", first.Hits(), second.Hits())
	}
	drop := e.p.Inject(faultproxy.Rule{Match: isGet, Fault: faultproxy.DropRequest})
	e.p.Clear()
	get() // with MaxRetries -1 a dropped request would fail
	if drop.Hits() != 0 {
		t.Fatalf("a cleared rule applied %d times", drop.Hits())
	}
	select {
	case <-drop.Hit():
		t.Fatal("Hit() closed for a rule that never applied")
	default:
	}
}

func TestDropReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	script := redis.NewScript(incrSrc)
	cases := []struct {
		name  string
		match faultproxy.Match
		load  bool // load the script first, so Run sends EVALSHA
		run   func(redis.Scripter) *redis.Cmd
	}{
		{"EVALSHA", faultproxy.And(faultproxy.Script(incrSrc), faultproxy.CommandIs("evalsha")), true,
			func(c redis.Scripter) *redis.Cmd { return script.Run(ctx, c, []string{"n"}) }},
		{"EVAL", faultproxy.And(faultproxy.Script(incrSrc), faultproxy.CommandIs("eval")), false,
			func(c redis.Scripter) *redis.Cmd { return script.Eval(ctx, c, []string{"n"}) }},
		{"ScriptSHA", faultproxy.ScriptSHA(strings.ToUpper(script.Hash())), true,
			func(c redis.Scripter) *redis.Cmd { return script.Run(ctx, c, []string{"n"}) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			if tc.load {
				if err := script.Load(ctx, e.direct).Err(); err != nil {
					t.Fatal(err)
				}
			}
			c := e.client(t, nil)
			in := e.p.Inject(faultproxy.Rule{Match: tc.match, Fault: faultproxy.DropReply, Times: 1})
			n, err := tc.run(c).Int()
			if err != nil {
				t.Fatalf("script: %v", err)
			}
			if n != 2 {
				t.Errorf("script returned %d, want 2 (the retry is its second run)", n)
			}
			if got := e.counter(t, "n"); got != 2 {
				t.Errorf("counter = %d, want 2: the dropped run and the retry", got)
			}
			if in.Hits() != 1 {
				t.Errorf("Hits = %d, want 1", in.Hits())
			}
			select {
			case <-in.Hit():
			default:
				t.Error("Hit() not closed")
			}
			if got := e.p.Accepted(); got != 2 {
				t.Errorf("Accepted = %d, want 2 (go-redis reconnected once)", got)
			}
		})
	}
}

func TestDropRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	script := redis.NewScript(incrSrc)
	if err := script.Load(ctx, e.direct).Err(); err != nil {
		t.Fatal(err)
	}
	c := e.client(t, nil)
	in := e.p.Inject(faultproxy.Rule{Match: faultproxy.Script(incrSrc), Fault: faultproxy.DropRequest, Times: 1})
	n, err := script.Run(ctx, c, []string{"n"}).Int()
	if err != nil || n != 1 {
		t.Fatalf("script = %d, %v; want 1", n, err)
	}
	if got := e.counter(t, "n"); got != 1 {
		t.Errorf("counter = %d, want 1: the dropped request never ran", got)
	}
	if in.Hits() != 1 || e.p.Accepted() != 2 {
		t.Errorf("Hits = %d, Accepted = %d; want 1 and 2", in.Hits(), e.p.Accepted())
	}
}

func TestSwallowReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	script := redis.NewScript(incrSrc)
	if err := script.Load(ctx, e.direct).Err(); err != nil {
		t.Fatal(err)
	}
	c := e.client(t, func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond })
	in := e.p.Inject(faultproxy.Rule{Match: faultproxy.Script(incrSrc), Fault: faultproxy.SwallowReply, Times: 1})
	start := time.Now()
	n, err := script.Run(ctx, c, []string{"n"}).Int()
	if err != nil || n != 2 {
		t.Fatalf("script = %d, %v; want 2", n, err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("call took %v; the swallowed reply should have cost a 200ms read timeout", d)
	}
	if got := e.counter(t, "n"); got != 2 {
		t.Errorf("counter = %d, want 2: the swallowed run and the retry", got)
	}
	if in.Hits() != 1 {
		t.Errorf("Hits = %d, want 1", in.Hits())
	}
}

func TestDelayReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	script := redis.NewScript(incrSrc)
	if err := script.Load(ctx, e.direct).Err(); err != nil {
		t.Fatal(err)
	}
	c1, c2 := e.client(t, nil), e.client(t, nil)
	for _, c := range []*redis.Client{c1, c2} { // connect before timing
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const delay = 300 * time.Millisecond
	in := e.p.Inject(faultproxy.Rule{Match: faultproxy.Script(incrSrc), Fault: faultproxy.DelayReply, Delay: delay, Times: 1})

	type result struct {
		n   int
		err error
		d   time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		n, err := script.Run(ctx, c1, []string{"n"}).Int()
		done <- result{n, err, time.Since(start)}
	}()
	<-in.Hit()
	start := time.Now()
	if err := c2.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING on another connection: %v", err)
	}
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Errorf("PING on another connection took %v; only the script's reply should be delayed", d)
	}
	r := <-done
	if r.err != nil || r.n != 1 {
		t.Fatalf("script = %d, %v; want 1", r.n, r.err)
	}
	if r.d < delay {
		t.Errorf("delayed call took %v, want >= %v", r.d, delay)
	}
	start = time.Now()
	if n, err := script.Run(ctx, c1, []string{"n"}).Int(); err != nil || n != 2 {
		t.Fatalf("second script = %d, %v; want 2", n, err)
	}
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Errorf("second call took %v; Times: 1 should delay only the first", d)
	}
	if in.Hits() != 1 {
		t.Errorf("Hits = %d, want 1", in.Hits())
	}
	if got := e.p.Accepted(); got != 2 {
		t.Errorf("Accepted = %d, want 2 (no reconnects)", got)
	}
}

func TestDelayRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	const src = "return redis.call('RPUSH', KEYS[1], ARGV[1])"
	script := redis.NewScript(src)
	if err := script.Load(ctx, e.direct).Err(); err != nil {
		t.Fatal(err)
	}
	c1, c2 := e.client(t, nil), e.client(t, nil)
	in := e.p.Inject(faultproxy.Rule{
		Match: faultproxy.And(faultproxy.Script(src), faultproxy.HasArg("a")),
		Fault: faultproxy.DelayRequest, Delay: 300 * time.Millisecond, Times: 1,
	})
	done := make(chan error, 1)
	go func() { done <- script.Run(ctx, c1, []string{"l"}, "a").Err() }()
	<-in.Hit()
	if n, err := script.Run(ctx, c2, []string{"l"}, "b").Int(); err != nil || n != 1 {
		t.Fatalf("b = %d, %v; want 1 (first in the list)", n, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a: %v", err)
	}
	got, err := e.direct.LRange(ctx, "l", 0, -1).Result()
	if want := []string{"b", "a"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("LRANGE = %q, %v; want %q: the delayed request should run last", got, err, want)
	}
}

func TestRefuseAndCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	noRetry := func(o *redis.Options) { o.MaxRetries = -1 }

	e.p.Refuse(true)
	if err := e.client(t, noRetry).Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded while refusing")
	}
	if got := e.p.Accepted(); got != 0 {
		t.Errorf("Accepted = %d, want 0 (refused connections are not counted)", got)
	}
	e.p.Refuse(false)
	if err := e.client(t, noRetry).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Refuse(false): %v", err)
	}

	c := e.client(t, nil)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	accepted, open := e.p.Accepted(), e.p.Open()
	if open != 2 {
		t.Errorf("Open = %d, want 2", open)
	}
	if n := e.p.Cut(); n != open {
		t.Errorf("Cut = %d, want %d", n, open)
	}
	if got := e.p.Open(); got != 0 {
		t.Errorf("Open after Cut = %d, want 0", got)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Cut = %q, %v; want v", got, err)
	}
	if got := e.p.Accepted(); got <= accepted {
		t.Errorf("Accepted = %d after Cut, want > %d (go-redis reconnected)", got, accepted)
	}
}

func TestPause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	c := e.client(t, nil)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	e.p.Pause()
	e.p.Pause() // twice is the same as once
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, "k", "v", 0).Err() }()
	select {
	case err := <-done:
		t.Fatalf("SET completed while paused (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	if got, err := e.direct.Exists(ctx, "k").Result(); err != nil || got != 0 {
		t.Fatalf("EXISTS k = %d, %v; the request should not have reached Redis", got, err)
	}
	e.p.Resume()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("SET after Resume: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("SET did not complete after Resume")
	}
	if got := e.p.Accepted(); got != 1 {
		t.Errorf("Accepted = %d, want 1 (the connection survived the pause)", got)
	}
}

func TestCloseWhilePaused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Pause()
	done := make(chan error, 1)
	go func() { done <- c.Ping(ctx).Err() }()
	time.Sleep(50 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close hung while paused")
	}
	if err := <-done; err == nil {
		t.Error("PING succeeded through a closed proxy")
	}
	if p.Open() != 0 {
		t.Errorf("Open = %d after Close", p.Open())
	}
}

func TestPubSub(t *testing.T) {
	t.Parallel()
	protocols(t, func(t *testing.T, proto int) {
		ctx := context.Background()
		e := setup(t)
		c := e.client(t, withProto(proto))
		sub := c.Subscribe(ctx, "ch")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		// A rule matching every request: it must not touch the connection now
		// that it is in pub/sub mode.
		all := e.p.Inject(faultproxy.Rule{Fault: faultproxy.DropRequest})
		if n, err := e.direct.Publish(ctx, "ch", "hello").Result(); err != nil || n != 1 {
			t.Fatalf("PUBLISH = %d, %v; want 1 subscriber", n, err)
		}
		msg, err := sub.ReceiveTimeout(ctx, 2*time.Second)
		if m, ok := msg.(*redis.Message); err != nil || !ok || m.Payload != "hello" {
			t.Fatalf("receive = %#v, %v; want message hello", msg, err)
		}
		if err := sub.Ping(ctx, "p1"); err != nil {
			t.Fatal(err)
		}
		msg, err = sub.ReceiveTimeout(ctx, 2*time.Second)
		if pong, ok := msg.(*redis.Pong); err != nil || !ok || pong.Payload != "p1" {
			t.Fatalf("receive = %#v, %v; want pong p1", msg, err)
		}
		if all.Hits() != 0 {
			t.Fatalf("a rule applied %d times on a pub/sub connection", all.Hits())
		}
		all.Remove()

		other := e.client(t, withProto(proto))
		if err := other.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		open := e.p.Open()
		if open != 2 {
			t.Errorf("Open = %d, want 2", open)
		}
		if n := e.p.BlackholePubSub(); n != 1 {
			t.Fatalf("BlackholePubSub = %d, want 1", n)
		}
		if n, err := e.direct.Publish(ctx, "ch", "lost").Result(); err != nil || n != 1 {
			t.Fatalf("PUBLISH = %d, %v; want 1 (Redis still sees the subscriber)", n, err)
		}
		if msg, err := sub.ReceiveTimeout(ctx, 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("receive after blackhole = %#v, %v; want a timeout", msg, err)
		}
		if err := sub.Ping(ctx, "p2"); err != nil {
			t.Fatalf("PING write: %v", err)
		}
		if msg, err := sub.ReceiveTimeout(ctx, 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("receive pong after blackhole = %#v, %v; want a timeout", msg, err)
		}
		if got := e.p.Open(); got != open {
			t.Errorf("Open = %d after blackhole, want %d (the connection stays open)", got, open)
		}
		if got := e.p.Accepted(); got != 2 {
			t.Errorf("Accepted = %d, want 2 (nothing reconnected)", got)
		}
		if err := other.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatalf("SET on another client: %v", err)
		}
		if got, err := other.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("GET on another client = %q, %v", got, err)
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// appendA matches APPEND requests with the argument "a".
var appendA = faultproxy.And(faultproxy.CommandIs("append"), faultproxy.HasArg("a"))

// request encodes a request as clients send it: an array of bulk strings.
func request(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// dial opens a raw connection through the proxy and sends reqs on it in one
// write.
func (e env) dial(t *testing.T, reqs ...string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", e.p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, strings.Join(reqs, "")); err != nil {
		t.Fatal(err)
	}
	return c
}

// get reads a string key directly from the server; a missing key reads as "".
func (e env) get(t *testing.T, key string) string {
	t.Helper()
	s, err := e.direct.Get(context.Background(), key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s: %v", key, err)
	}
	return s
}

// waitOpen waits until the proxy has want open connections.
func waitOpen(t *testing.T, p *faultproxy.Proxy, want int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); p.Open() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("Open = %d, want %d", p.Open(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitDelivered(t *testing.T, in *faultproxy.Injection) {
	t.Helper()
	select {
	case <-in.Delivered():
	case <-time.After(5 * time.Second):
		t.Fatal("Delivered not closed: the held request was not answered")
	}
}

func notDelivered(t *testing.T, in *faultproxy.Injection, msg string) {
	t.Helper()
	select {
	case <-in.Delivered():
		t.Fatal("Delivered closed " + msg)
	default:
	}
}

// TestHoldRequestOutlivesClient is a request stuck in the network: go-redis
// gives up on it after its read timeout, retries on a new connection and goes
// on, and the first copy reaches Redis only when the test releases it.
func TestHoldRequestOutlivesClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	c := e.client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = 1
	})
	in := e.p.Inject(faultproxy.Rule{Match: appendA, Fault: faultproxy.HoldRequest, Times: 1})
	if n, err := c.Append(ctx, "k", "a").Result(); err != nil || n != 1 {
		t.Fatalf("APPEND a = %d, %v; want 1 (the retry runs, the first copy is held)", n, err)
	}
	if n, err := c.Append(ctx, "k", "b").Result(); err != nil || n != 2 {
		t.Fatalf("APPEND b = %d, %v; want 2", n, err)
	}
	if got := e.p.Accepted(); got != 2 {
		t.Errorf("Accepted = %d, want 2 (go-redis reconnected once)", got)
	}
	if got := e.get(t, "k"); got != "ab" {
		t.Fatalf("k = %q before Release, want ab", got)
	}
	notDelivered(t, in, "before Release")
	in.Release()
	waitDelivered(t, in)
	if got := e.get(t, "k"); got != "aba" {
		t.Fatalf("k = %q, want aba: the held copy runs when released, after the client's next request", got)
	}
	if in.Hits() != 1 {
		t.Errorf("Hits = %d, want 1", in.Hits())
	}
	waitOpen(t, e.p, 1) // the held copy's connection closes once it is answered
}

// TestHoldRequestClientGone checks that the requests a client sent after a
// held one, before closing the connection, reach Redis after it when it is
// released, with their own faults, and that the connection then closes.
func TestHoldRequestClientGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	in := e.p.Inject(faultproxy.Rule{Match: appendA, Fault: faultproxy.HoldRequest})
	// b still goes, after its delay, though a has been answered by then.
	delayB := e.p.Inject(faultproxy.Rule{
		Match: faultproxy.And(faultproxy.CommandIs("append"), faultproxy.HasArg("b")),
		Fault: faultproxy.DelayRequest, Delay: 100 * time.Millisecond,
	})
	raw := e.dial(t, request("APPEND", "k", "a"), request("APPEND", "k", "b"))
	<-in.Hit()
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.direct.Append(ctx, "k", "x").Err(); err != nil {
		t.Fatal(err)
	}
	in.Release()
	waitDelivered(t, in)
	waitOpen(t, e.p, 0)
	// b, delayed, may still be on its way once the connection is counted
	// closed (seen once on a loaded machine): the order is what counts.
	got := e.get(t, "k")
	for deadline := time.Now().Add(5 * time.Second); len(got) < 3 && time.Now().Before(deadline); got = e.get(t, "k") {
		time.Sleep(10 * time.Millisecond)
	}
	if got != "xab" {
		t.Fatalf("k = %q, want xab: the held request, then the one behind it", got)
	}
	if delayB.Hits() != 1 {
		t.Errorf("the rule for b applied %d times, want 1", delayB.Hits())
	}
}

// TestHoldRequestRelease lets a held request go while its client still
// waits: the client gets its reply, and the request it sent behind the held
// one runs after it.
func TestHoldRequestRelease(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		letGo    func(*faultproxy.Proxy, *faultproxy.Injection)
		hitsThen int // Hits after one more matching request
	}{
		{"Release", func(_ *faultproxy.Proxy, in *faultproxy.Injection) { in.Release() }, 2},
		{"Remove", func(_ *faultproxy.Proxy, in *faultproxy.Injection) { in.Remove() }, 1},
		{"Clear", func(p *faultproxy.Proxy, _ *faultproxy.Injection) { p.Clear() }, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := setup(t)
			c := e.client(t, nil)
			in := e.p.Inject(faultproxy.Rule{Match: appendA, Fault: faultproxy.HoldRequest})
			done := make(chan []redis.Cmder, 1)
			go func() {
				// One pipeline: both requests go out in one write, b behind a.
				cmds, _ := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
					pl.Append(ctx, "k", "a")
					pl.Append(ctx, "k", "b")
					return nil
				})
				done <- cmds
			}()
			<-in.Hit()
			if err := e.direct.Append(ctx, "k", "x").Err(); err != nil {
				t.Fatal(err)
			}
			if got := e.get(t, "k"); got != "x" {
				t.Fatalf("k = %q while a is held, want x: b must wait behind a", got)
			}
			notDelivered(t, in, "before the request was let go")
			tc.letGo(e.p, in)
			var cmds []redis.Cmder
			select {
			case cmds = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("the pipeline got no replies after the held request was let go")
			}
			for i, want := range []int64{2, 3} {
				if n, err := cmds[i].(*redis.IntCmd).Result(); err != nil || n != want {
					t.Errorf("reply %d = %d, %v; want %d", i, n, err, want)
				}
			}
			waitDelivered(t, in)
			if got := e.get(t, "k"); got != "xab" {
				t.Fatalf("k = %q, want xab", got)
			}
			// A request after the release is not held.
			if n, err := c.Append(ctx, "k", "a").Result(); err != nil || n != 4 {
				t.Fatalf("APPEND after release = %d, %v; want 4", n, err)
			}
			if got := in.Hits(); got != tc.hitsThen {
				t.Errorf("Hits = %d, want %d", got, tc.hitsThen)
			}
		})
	}
}

// TestHoldRequestDropped checks that Cut and Close drop held requests, whether
// or not their client is still there, and that Close does not wait for them.
func TestHoldRequestDropped(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		clientGone bool // the client closes its connection first
		close      bool // Close the proxy rather than Cut
	}{
		{"Cut", false, false},
		{"CutAfterClientGone", true, false},
		{"Close", false, true},
		{"CloseAfterClientGone", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := setup(t)
			in := e.p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("set"), Fault: faultproxy.HoldRequest})
			raw := e.dial(t, request("SET", "k", "v"))
			<-in.Hit()
			if tc.clientGone {
				if err := raw.Close(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond) // for the proxy to see the close
			}
			if tc.close {
				closed := make(chan error, 1)
				go func() { closed <- e.p.Close() }()
				select {
				case err := <-closed:
					if err != nil {
						t.Errorf("Close: %v", err)
					}
				case <-time.After(2 * time.Second):
					t.Fatal("Close hung while a request was held")
				}
			} else if n := e.p.Cut(); n != 1 {
				t.Errorf("Cut = %d, want 1", n)
			}
			if got := e.p.Open(); got != 0 {
				t.Errorf("Open = %d, want 0", got)
			}
			if !tc.clientGone {
				_ = raw.SetReadDeadline(time.Now().Add(2 * time.Second))
				if got, err := io.ReadAll(raw); err != nil || len(got) != 0 {
					t.Errorf("client read %q, %v; want EOF", got, err)
				}
			}
			in.Release()
			time.Sleep(100 * time.Millisecond) // time for a request that should not come
			notDelivered(t, in, "for a dropped request")
			if n, err := e.direct.Exists(ctx, "k").Result(); err != nil || n != 0 {
				t.Fatalf("EXISTS k = %d, %v; want 0: the dropped request must never run", n, err)
			}
		})
	}
}
