package orders_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/examples/flashsale/orders"
	"github.com/dlock-go/dlock/idgen"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/stock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// The worker's environment: Redis, the database and its schema.
const (
	envWorker = "ORDERS_TEST_WORKER" // the consumer's name; TestMain runs it when set
	envRedis  = "ORDERS_TEST_REDIS"
	envPG     = "ORDERS_TEST_PG"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(envWorker); name != "" {
		os.Exit(consumerProcess(name))
	}
	os.Exit(m.Run())
}

// pgURL is the test database: FLASHSALE_PG, or the machine's local one.
func pgURL() string {
	if u := os.Getenv("FLASHSALE_PG"); u != "" {
		return u
	}
	return "postgres://127.0.0.1:5432/test?sslmode=disable"
}

// database makes a schema of its own for t, with the tables, dropped at the
// end, and returns its URL and a pool on it.
func database(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	redistest.Full(t, "PostgreSQL")
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, pgURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	schema := fmt.Sprintf("flashsale_test_%d_%d", os.Getpid(), rand.IntN(1e9))
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("PostgreSQL at %s: %v", pgURL(), err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	url := pgURL() + "&search_path=" + schema
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := orders.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return url, db
}

func salesOn(rdb redis.UniversalClient) (*stock.Sales, error) {
	ids, err := idgen.New(rdb, "order")
	if err != nil {
		return nil, err
	}
	return stock.New(rdb, ids)
}

// consumerProcess consumes sale "s" until killed, 2ms per entry.
func consumerProcess(name string) int {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	db, err := pgxpool.New(ctx, os.Getenv(envPG))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sales, err := salesOn(rdb)
	if err != nil {
		return 2
	}
	c := &orders.Consumer{RDB: rdb, DB: db, Sales: sales, Sale: "s", Name: name,
		Batch: 16, MinIdle: 500 * time.Millisecond, Each: func() { time.Sleep(2 * time.Millisecond) }}
	_, err = c.Run(ctx)
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// TestKilledConsumer: 500 orders, three consumer processes, one killed with
// SIGKILL mid-batch. The database ends with every order once: its entries
// were claimed by the others. The database's stock (480) is below Redis's
// (600), so 20 orders are refused there and given back to Redis.
func TestKilledConsumer(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	url, db := database(t)
	ctx := context.Background()
	sales, err := salesOn(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := orders.CreateSale(ctx, db, sales, "s", 600, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE sales SET stock = 480 WHERE id = 's'`); err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		if r, err := sales.Buy(ctx, "s", "user-"+strconv.Itoa(i), 1); err != nil || r.Outcome != stock.Ordered {
			t.Fatalf("Buy: %+v, %v", r, err)
		}
	}
	var procs []*exec.Cmd
	for i := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorker+"=c"+strconv.Itoa(i), envRedis+"="+srv.Addr, envPG+"="+url)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	count := func() (rows int64) {
		_ = db.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&rows)
		return rows
	}
	deadline := time.Now().Add(30 * time.Second)
	for count() < 100 {
		if time.Now().After(deadline) {
			t.Fatal("the consumers wrote too little")
		}
		time.Sleep(5 * time.Millisecond)
	}
	pending, _ := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: sales.Stream("s"), Group: stock.OrdersGroup, Start: "-", End: "+", Count: 1000, Consumer: "c0"}).Result()
	if err := procs[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed consumer c0 with %d entries pending, %d orders written", len(pending), count())
	for {
		var refusedBack int64
		left, _ := sales.Left(ctx, "s")
		refusedBack = left - (600 - n)
		if count()+refusedBack == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d orders written, %d given back, of %d", count(), refusedBack, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var rows, users, pgStock int64
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT user_id) FROM orders`).Scan(&rows, &users); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, `SELECT stock FROM sales WHERE id = 's'`).Scan(&pgStock); err != nil {
		t.Fatal(err)
	}
	left, _ := sales.Left(ctx, "s")
	if rows != 480 || users != 480 || pgStock != 0 || left != 600-n+20 {
		t.Errorf("%d orders of %d users, database stock %d, Redis stock %d; want 480 orders of 480 users, 0, %d", rows, users, pgStock, left, 600-n+20)
	}
	if !withinT(5*time.Second, func() bool {
		p, _ := rdb.XPending(ctx, sales.Stream("s"), stock.OrdersGroup).Result()
		return p != nil && p.Count == 0
	}) {
		t.Errorf("entries still pending: %v", rdb.XPending(ctx, sales.Stream("s"), stock.OrdersGroup).Val())
	}
}

func withinT(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestDeadLetter: an entry that cannot be written moves to the dead-letter
// stream after MaxDeliveries deliveries; the others are written.
func TestDeadLetter(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	_, db := database(t)
	ctx := context.Background()
	sales, _ := salesOn(rdb)
	if err := orders.CreateSale(ctx, db, sales, "s", 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := sales.Buy(ctx, "s", "a", 1); err != nil {
		t.Fatal(err)
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: sales.Stream("s"), Values: map[string]any{"order": "not-a-number", "user": "b", "n": "1"}})
	if _, err := sales.Buy(ctx, "s", "c", 1); err != nil {
		t.Fatal(err)
	}
	c := &orders.Consumer{RDB: rdb, DB: db, Sales: sales, Sale: "s", Name: "only", MinIdle: 50 * time.Millisecond, MaxDeliveries: 2, Block: 50 * time.Millisecond}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	done := make(chan orders.Outcome, 1)
	go func() { out, _ := c.Run(cctx); done <- out }()
	if !withinT(3*time.Second, func() bool { return rdb.XLen(ctx, orders.DeadLetter(sales, "s")).Val() == 1 }) {
		t.Fatal("the bad entry never reached the dead-letter stream")
	}
	cancel()
	out := <-done
	var rows int64
	_ = db.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&rows)
	if rows != 2 || out.Written != 2 || out.Dead != 1 {
		t.Errorf("%d rows, outcome %+v; want 2 written, 1 dead", rows, out)
	}
	dead := rdb.XRange(ctx, orders.DeadLetter(sales, "s"), "-", "+").Val()
	if len(dead) != 1 || dead[0].Values["order"] != "not-a-number" {
		t.Errorf("dead letters: %v", dead)
	}
	t.Logf("outcome %+v", out)
}

// TestAckLost: every acknowledgement of the first deliveries is lost (the
// XACK never reaches Redis, through all of go-redis's retries), after the
// order was written or refused. The entries are delivered again after
// MinIdle: a written order is found and acknowledged, not written twice; a
// refused one is given back to Redis once.
func TestAckLost(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	direct := srv.Client(t)
	_, db := database(t)
	ctx := context.Background()
	sales, err := salesOn(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := orders.CreateSale(ctx, db, sales, "s", 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE sales SET stock = 5 WHERE id = 's'`); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if r, err := sales.Buy(ctx, "s", "user-"+strconv.Itoa(i), 1); err != nil || r.Outcome != stock.Ordered {
			t.Fatalf("Buy: %+v, %v", r, err)
		}
	}
	// Each XACK is tried four times (MaxRetries 3): the first 40 are the
	// ten first deliveries' acknowledgements.
	acks := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("xack"), Fault: faultproxy.DropRequest, Times: 40})
	c := &orders.Consumer{RDB: rdb, DB: db, Sales: sales, Sale: "s", Name: "only", MinIdle: 200 * time.Millisecond, Block: 50 * time.Millisecond}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	done := make(chan orders.Outcome, 1)
	go func() { out, _ := c.Run(cctx); done <- out }()
	if !withinT(15*time.Second, func() bool {
		p, _ := direct.XPending(ctx, sales.Stream("s"), stock.OrdersGroup).Result()
		return acks.Hits() == 40 && p != nil && p.Count == 0
	}) {
		t.Fatalf("%d acknowledgements lost; pending after 15s: %v", acks.Hits(), direct.XPending(ctx, sales.Stream("s"), stock.OrdersGroup).Val())
	}
	cancel()
	out := <-done
	var rows, users int64
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT user_id) FROM orders`).Scan(&rows, &users); err != nil {
		t.Fatal(err)
	}
	left, err := sales.Left(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if rows != 5 || users != 5 || left != 5 || out.Already != 5 || out.Refused != 5 || out.Written != 0 {
		t.Errorf("%d orders of %d users, Redis stock %d, outcome %+v; want 5 orders, 5 given back once, 5 found already written and 5 refused on their acknowledged delivery", rows, users, left, out)
	}
}

// commandCounter is a go-redis hook that counts the commands called name
// that a client sends, alone or in a pipeline.
type commandCounter struct {
	name string
	n    atomic.Int64
}

func (cc *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (cc *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == cc.name {
			cc.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (cc *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == cc.name {
				cc.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestDeliveriesOncePerBatch: a consumer that claims a batch of 10 entries
// of a consumer that died asks how often they were delivered (XPENDING) once
// for the batch, not once per entry; it writes all 10.
func TestDeliveriesOncePerBatch(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	_, db := database(t)
	ctx := context.Background()
	sales, err := salesOn(rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := orders.CreateSale(ctx, db, sales, "s", 10, time.Hour); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if r, err := sales.Buy(ctx, "s", "user-"+strconv.Itoa(i), 1); err != nil || r.Outcome != stock.Ordered {
			t.Fatalf("Buy: %+v, %v", r, err)
		}
	}
	stream := sales.Stream("s")
	// A consumer reads every entry and dies before it writes any.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: stock.OrdersGroup, Consumer: "dead", Streams: []string{stream, ">"}, Count: 100}).Err(); err != nil {
		t.Fatal(err)
	}
	const minIdle = 100 * time.Millisecond
	if !withinT(5*time.Second, func() bool {
		p, _ := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: stock.OrdersGroup, Idle: minIdle, Start: "-", End: "+", Count: 100}).Result()
		return len(p) == 10
	}) {
		t.Fatal("the dead consumer's entries never became idle")
	}
	counted := srv.Client(t)
	xpending := &commandCounter{name: "xpending"}
	counted.AddHook(xpending)
	c := &orders.Consumer{RDB: counted, DB: db, Sales: sales, Sale: "s", Name: "only", MinIdle: minIdle, Block: 50 * time.Millisecond}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := make(chan orders.Outcome, 1)
	go func() { out, _ := c.Run(cctx); done <- out }()
	if !withinT(10*time.Second, func() bool {
		p, _ := rdb.XPending(ctx, stream, stock.OrdersGroup).Result()
		return p != nil && p.Count == 0
	}) {
		t.Fatalf("entries still pending: %v", rdb.XPending(ctx, stream, stock.OrdersGroup).Val())
	}
	cancel()
	out := <-done
	if out.Written != 10 {
		t.Errorf("outcome %+v, want 10 written", out)
	}
	if n := xpending.n.Load(); n != 1 {
		t.Errorf("the consumer sent XPENDING %d times for one claimed batch of 10, want once", n)
	}
}
