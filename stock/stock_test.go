package stock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/idgen"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/stock"
	"github.com/redis/go-redis/v9"
)

const (
	envWorker = "STOCK_TEST_WORKER" // the worker's index; TestMain runs the worker when set
	envRedis  = "STOCK_TEST_REDIS"
)

func TestMain(m *testing.M) {
	if w := os.Getenv(envWorker); w != "" {
		os.Exit(worker(w))
	}
	redistest.Main(m, 1)
}

func sales(t testing.TB, rdb redis.UniversalClient) *stock.Sales {
	t.Helper()
	ids, err := idgen.New(rdb, "order")
	if err != nil {
		t.Fatal(err)
	}
	s, err := stock.New(rdb, ids)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// workerReport is what a buyer process prints: per outcome, how many Buys
// came to it, and the order ids it was given.
type workerReport struct {
	Outcomes map[string]int
	Orders   map[string]int64 // user -> order id
	Errors   []string
}

// worker runs 40 users in one process, each clicking Buy three times at
// once (duplicate submissions), on the sale "s".
func worker(w string) int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	ids, _ := idgen.New(rdb, "order")
	s, _ := stock.New(rdb, ids)
	rep := workerReport{Outcomes: map[string]int{}, Orders: map[string]int64{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for u := range 40 {
		user := "u" + w + "-" + strconv.Itoa(u)
		for range 3 {
			wg.Go(func() {
				r, err := s.Buy(context.Background(), "s", user, 1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					rep.Errors = append(rep.Errors, err.Error())
					return
				}
				rep.Outcomes[r.Outcome.String()]++
				if r.Outcome == stock.Ordered {
					if prev, ok := rep.Orders[user]; ok && prev != r.OrderID {
						rep.Errors = append(rep.Errors, fmt.Sprintf("%s ordered twice: %d and %d", user, prev, r.OrderID))
					}
					rep.Orders[user] = r.OrderID
				}
			})
		}
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

// TestFlashSale: 5 processes of 40 users, each clicking three times at once,
// on a sale of 100 items: exactly 100 sold, to 100 distinct users, one
// order each, and the stream has exactly those 100 orders.
func TestFlashSale(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	s := sales(t, rdb)
	if ok, err := s.Create(ctx, "s", 100, time.Hour); err != nil || !ok {
		t.Fatalf("Create: %v, %v", ok, err)
	}
	const procs = 5
	outs := make([]strings.Builder, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
		cmds[i].Env = append(os.Environ(), envWorker+"="+strconv.Itoa(i), envRedis+"="+srv.Addr)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], os.Stderr
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	orders := map[string]int64{}
	outcomes := map[string]int{}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		var rep workerReport
		if err := json.Unmarshal([]byte(outs[i].String()), &rep); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		for _, e := range rep.Errors {
			t.Errorf("worker %d: %s", i, e)
		}
		for k, n := range rep.Outcomes {
			outcomes[k] += n
		}
		for u, id := range rep.Orders {
			orders[u] = id
		}
	}
	t.Logf("outcomes of %d clicks: %v", procs*40*3, outcomes)
	if len(orders) != 100 {
		t.Errorf("%d users have an order, want 100", len(orders))
	}
	if left, err := s.Left(ctx, "s"); err != nil || left != 0 {
		t.Errorf("left %d, %v; want 0", left, err)
	}
	entries := rdb.XRange(ctx, s.Stream("s"), "-", "+").Val()
	seen := map[string]bool{}
	for _, e := range entries {
		u := e.Values["user"].(string)
		if seen[u] {
			t.Errorf("the stream has two orders of %s", u)
		}
		seen[u] = true
		if id, _ := strconv.ParseInt(e.Values["order"].(string), 10, 64); id != orders[u] {
			t.Errorf("stream order %v of %s, the buyer was told %d", e.Values["order"], u, orders[u])
		}
	}
	if len(entries) != 100 {
		t.Errorf("the stream has %d orders, want 100", len(entries))
	}
}

// TestRetriedBuy: a Buy whose reply is lost is run again by go-redis: the
// buyer is told "ordered" with the same order id, and one item is deducted,
// with one stream entry. A GiveBack retried the same way gives back once.
func TestRetriedBuy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	direct := srv.Client(t)
	ctx := context.Background()
	s := sales(t, rdb)
	if _, err := s.Create(ctx, "r", 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Left(ctx, "r"); err != nil { // the scripts are loaded; what follows is EVALSHA
		t.Fatal(err)
	}
	if _, err := s.Buy(ctx, "r", "warm-up", 1); err != nil {
		t.Fatal(err)
	}
	lost := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("EVALSHA"), Fault: faultproxy.DropReply, Times: 1})
	r, err := s.Buy(ctx, "r", "alice", 2)
	if err != nil {
		t.Fatal(err)
	}
	if lost.Hits() != 1 || r.Outcome != stock.Ordered || r.Left != 7 {
		t.Fatalf("Buy with its reply lost once: %+v (fault hit %d)", r, lost.Hits())
	}
	if n := direct.XLen(ctx, s.Stream("r")).Val(); n != 2 {
		t.Errorf("%d stream entries, want 2 (warm-up and alice)", n)
	}
	again, err := s.Buy(ctx, "r", "alice", 2)
	if err != nil || again.Outcome != stock.AlreadyOrdered || again.OrderID != r.OrderID {
		t.Errorf("alice's second Buy: %+v, %v; want AlreadyOrdered with order %d", again, err, r.OrderID)
	}
	lost = p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("EVALSHA"), Fault: faultproxy.DropReply, Times: 1})
	ok, err := s.GiveBack(ctx, "r", "alice", r.OrderID)
	if err != nil || !ok || lost.Hits() != 1 {
		t.Fatalf("GiveBack with its reply lost once: %v, %v (fault hit %d)", ok, err, lost.Hits())
	}
	if left, _ := s.Left(ctx, "r"); left != 9 {
		t.Errorf("left %d after the give-back, want 9", left)
	}
	if ok, _ := s.GiveBack(ctx, "r", "alice", r.OrderID+1); ok {
		t.Error("a give-back of an order alice does not have succeeded")
	}
	if r2, err := s.Buy(ctx, "r", "alice", 1); err != nil || r2.Outcome != stock.Ordered || r2.OrderID == r.OrderID {
		t.Errorf("alice's order after the give-back: %+v, %v", r2, err)
	}
}

// TestSaleOutcomes: sold out, no such sale, a sale created twice, and the
// keys expiring with the sale.
func TestSaleOutcomes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	s := sales(t, rdb)
	if r, err := s.Buy(ctx, "none", "u", 1); err != nil || r.Outcome != stock.NoSuchSale {
		t.Errorf("Buy of no sale: %+v, %v", r, err)
	}
	if _, err := s.Left(ctx, "none"); !errors.Is(err, stock.ErrNoSuchSale) {
		t.Errorf("Left of no sale: %v", err)
	}
	if _, err := s.GiveBack(ctx, "none", "u", 1); !errors.Is(err, stock.ErrNoSuchSale) {
		t.Errorf("GiveBack of no sale: %v", err)
	}
	if ok, err := s.Create(ctx, "x", 3, time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if ok, err := s.Create(ctx, "x", 50, time.Minute); err != nil || ok {
		t.Errorf("second Create: %v, %v; want false", ok, err)
	}
	if r, _ := s.Buy(ctx, "x", "a", 2); r.Outcome != stock.Ordered || r.Left != 1 {
		t.Errorf("buy 2 of 3: %+v", r)
	}
	if r, _ := s.Buy(ctx, "x", "b", 2); r.Outcome != stock.SoldOut || r.Left != 1 {
		t.Errorf("buy 2 of 1 left: %+v", r)
	}
	if r, _ := s.Buy(ctx, "x", "b", 1); r.Outcome != stock.Ordered || r.Left != 0 {
		t.Errorf("buy 1 of 1 left: %+v", r)
	}
	for _, k := range rdb.Keys(ctx, "dlock:sale:*").Val() {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("key %s: TTL %v, want the sale's", k, ttl)
		}
	}
	if err := s.Delete(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if keys := rdb.Keys(ctx, "dlock:sale:*").Val(); len(keys) != 0 {
		t.Errorf("keys left after Delete: %v", keys)
	}
}

// TestOnCluster: a sale's keys share a slot, so its scripts run on a
// Cluster.
func TestOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	rdb := cl.Client(t)
	ctx := context.Background()
	s := sales(t, rdb)
	for i := range 5 {
		sale := "c" + strconv.Itoa(i)
		if _, err := s.Create(ctx, sale, 1, time.Minute); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Buy(ctx, sale, "u", 1); err != nil || r.Outcome != stock.Ordered {
			t.Fatalf("Buy on a Cluster: %+v, %v", r, err)
		}
		if ok, err := s.GiveBack(ctx, sale, "u", 0); err != nil || ok {
			t.Errorf("GiveBack of a wrong order: %v, %v", ok, err)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ids, _ := idgen.New(rdb, "order")
	if _, err := stock.New(nil, ids); err == nil {
		t.Error("New with a nil client succeeded")
	}
	if _, err := stock.New(rdb, nil); err == nil {
		t.Error("New with no id generator succeeded")
	}
	if _, err := stock.New(rdb, ids, stock.WithPrefix("a{")); err == nil {
		t.Error("a prefix with a brace was accepted")
	}
	s := sales(t, rdb)
	ctx := context.Background()
	long := strings.Repeat("x", stock.MaxIDLen+1)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"empty sale", func() error { _, err := s.Create(ctx, "", 1, time.Minute); return err }},
		{"negative stock", func() error { _, err := s.Create(ctx, "s", -1, time.Minute); return err }},
		{"no TTL", func() error { _, err := s.Create(ctx, "s", 1, 0); return err }},
		{"sale with a brace", func() error { _, err := s.Buy(ctx, "a}b", "u", 1); return err }},
		{"oversized user", func() error { _, err := s.Buy(ctx, "s", long, 1); return err }},
		{"empty user", func() error { _, err := s.Buy(ctx, "s", "", 1); return err }},
		{"zero items", func() error { _, err := s.Buy(ctx, "s", "u", 0); return err }},
		{"negative items", func() error { _, err := s.Buy(ctx, "s", "u", -3); return err }},
		{"give back for no user", func() error { _, err := s.GiveBack(ctx, "s", "", 1); return err }},
	} {
		if err := tc.call(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if keys := rdb.Keys(ctx, "dlock:sale:*").Val(); len(keys) != 0 {
		t.Errorf("bad input wrote %v", keys)
	}
}
