package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/stock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// buyerCmdName is the hidden command a load test runs in each buyer process.
const buyerCmdName = "buyer"

// loadResult is what a load test prints.
type loadResult struct {
	Stock           int64          `json:"stock"`
	Sold            int64          `json:"sold"`
	Oversold        int64          `json:"oversold"`
	DuplicateOrders int64          `json:"duplicate_orders"`
	LostOrders      int64          `json:"lost_orders"`
	OrdersPerS      float64        `json:"orders_per_s"`
	P50ms           float64        `json:"p50_ms"`
	P99ms           float64        `json:"p99_ms"`
	Requests        int64          `json:"requests"`
	Processes       int            `json:"buyer_processes"`
	Users           int            `json:"users"`
	Outcomes        map[string]int `json:"outcomes"` // by HTTP status and outcome
	DrainS          float64        `json:"drain_s"`  // from the last request until every accepted order was in the database
	LeftInRedis     int64          `json:"left_in_redis"`
	StockInDB       int64          `json:"stock_in_db"`
}

func loadtestCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	procs := fs.Int("procs", 4, "buyer OS processes")
	users := fs.Int("users", 2000, "buyers")
	clicks := fs.Int("clicks", 3, "clicks per buyer with one Idempotency-Key, sent at once")
	stockN := fs.Int64("stock", 500, "items on sale")
	conc := fs.Int("concurrency", 32, "buyers clicking at once in each process")
	redisURL := fs.String("redis", defaultRedis, "Redis URL")
	pgURL := fs.String("pg", defaultPG, "PostgreSQL URL (the run makes a schema of its own there and drops it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *procs < 1 || *users < 1 || *clicks < 1 || *stockN < 0 || *conc < 1 {
		return errors.New("loadtest: -procs, -users, -clicks and -concurrency must be at least 1, -stock at least 0")
	}
	run := fmt.Sprintf("load-%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)

	// A schema of its own, dropped at the end.
	admin, err := pgxpool.New(ctx, *pgURL)
	if err != nil {
		return fmt.Errorf("PostgreSQL: %w", err)
	}
	defer admin.Close()
	schema := strings.ReplaceAll(run, "-", "_")
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return fmt.Errorf("PostgreSQL at %s: %w", *pgURL, err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE")
	u, err := url.Parse(*pgURL)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	s, err := newService(ctx, *redisURL, u.String())
	if err != nil {
		return err
	}
	defer s.close()
	defer s.cleanRedis(context.WithoutCancel(ctx), run)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.handler()}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	sale := run
	body, _ := json.Marshal(createReq{ID: sale, Stock: *stockN, TTLs: 3600})
	resp, err := http.Post(base+"/sales", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("create the sale: %s", resp.Status)
	}

	// The buyers: OS processes of this program, each a share of the users.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	start := time.Now()
	errw := &lockedWriter{w: stderr}
	reports := make([]buyerReport, *procs)
	errs := make([]error, *procs)
	var wg sync.WaitGroup
	for p := range *procs {
		from, to := p**users / *procs, (p+1)**users / *procs
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, exe, buyerCmdName, "-url", base, "-sale", sale, "-run", run,
				"-from", strconv.Itoa(from), "-to", strconv.Itoa(to), "-clicks", strconv.Itoa(*clicks), "-concurrency", strconv.Itoa(*conc))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, errw
			if errs[p] = cmd.Run(); errs[p] == nil {
				errs[p] = json.Unmarshal(out.Bytes(), &reports[p])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("buyer processes: %w", err)
	}
	lastRequest := time.Now()

	res := loadResult{Stock: *stockN, Processes: *procs, Users: *users, Outcomes: map[string]int{}}
	accepted := map[int64]string{} // order id -> user
	var lat []time.Duration
	for _, rep := range reports {
		for k, n := range rep.Outcomes {
			res.Outcomes[k] += n
			res.Requests += int64(n)
		}
		for id, user := range rep.Accepted {
			n, _ := strconv.ParseInt(id, 10, 64)
			accepted[n] = user
		}
		lat = append(lat, rep.Latencies...)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		res.P50ms = ms(lat[len(lat)/2])
		res.P99ms = ms(lat[min(len(lat)-1, len(lat)*99/100)])
	}

	// The pipeline drains: every accepted order in the database, or given
	// back (refused there). Lost ones never arrive: give up after 60s.
	db := s.db
	deadline := time.Now().Add(60 * time.Second)
	for {
		pending, err := s.rdb.XPending(ctx, s.sales.Stream(sale), stock.OrdersGroup).Result()
		backlog, err2 := s.rdb.XInfoGroups(ctx, s.sales.Stream(sale)).Result()
		lag := int64(-1)
		if err2 == nil && len(backlog) > 0 {
			lag = backlog[0].Lag
		}
		if err == nil && pending.Count == 0 && lag == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := time.Now()
	res.DrainS = done.Sub(lastRequest).Seconds()
	var sold, buyers int64
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT user_id) FROM orders WHERE sale = $1`, sale).Scan(&sold, &buyers); err != nil {
		return err
	}
	_ = db.QueryRow(ctx, `SELECT stock FROM sales WHERE id = $1`, sale).Scan(&res.StockInDB)
	res.LeftInRedis, _ = s.sales.Left(ctx, sale)
	res.Sold = sold
	res.Oversold = max(0, sold-*stockN)
	res.DuplicateOrders = sold - buyers
	rows, err := db.Query(ctx, `SELECT id FROM orders WHERE sale = $1`, sale)
	if err != nil {
		return err
	}
	inDB := map[int64]bool{}
	for rows.Next() {
		var id int64
		if rows.Scan(&id) == nil {
			inDB[id] = true
		}
	}
	rows.Close()
	for id := range accepted {
		if !inDB[id] {
			res.LostOrders++
		}
	}
	res.OrdersPerS = float64(sold) / done.Sub(start).Seconds()

	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "stock\tsold\toversold\tduplicate orders\tlost orders\torders/s\tclick p50\tclick p99\trequests\tdrain\n")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%.0f\t%.1fms\t%.1fms\t%d\t%.2fs\n", res.Stock, res.Sold, res.Oversold, res.DuplicateOrders, res.LostOrders,
		res.OrdersPerS, res.P50ms, res.P99ms, res.Requests, res.DrainS)
	_ = tw.Flush()
	keys := make([]string, 0, len(res.Outcomes))
	for k := range res.Outcomes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(stdout, "  %-28s %d\n", k, res.Outcomes[k])
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cleanRedis removes the run's sale and stored responses.
func (s *service) cleanRedis(ctx context.Context, run string) {
	_ = s.sales.Delete(ctx, run)
	var cursor uint64
	for {
		keys, next, err := s.rdb.Scan(ctx, cursor, "dlock:idem:{"+run+"*", 1000).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			for _, k := range keys {
				s.rdb.Del(ctx, k)
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// buyerReport is what a buyer process prints.
type buyerReport struct {
	Outcomes  map[string]int    // "202 ordered", "409 already ordered", ...
	Accepted  map[string]string // order id -> user, of the 202s
	Latencies []time.Duration
}

// buyerCmd clicks for users [from, to): each user sends -clicks requests at
// once with one Idempotency-Key (a double click), and every fifth user one
// more with a new key (a reload): the server must answer all with one order.
func buyerCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(buyerCmdName, flag.ContinueOnError)
	base := fs.String("url", "", "")
	sale := fs.String("sale", "", "")
	run := fs.String("run", "", "")
	from := fs.Int("from", 0, "")
	to := fs.Int("to", 0, "")
	clicks := fs.Int("clicks", 3, "")
	conc := fs.Int("concurrency", 32, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *conc * (*clicks + 1)}, Timeout: 30 * time.Second}
	rep := buyerReport{Outcomes: map[string]int{}, Accepted: map[string]string{}}
	var mu sync.Mutex
	click := func(user, key string) error {
		body, _ := json.Marshal(buyReq{User: user, N: 1})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, *base+"/sales/"+url.PathEscape(*sale)+"/orders", bytes.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var out buyReply
		_ = json.NewDecoder(resp.Body).Decode(&out)
		took := time.Since(t0)
		mu.Lock()
		defer mu.Unlock()
		rep.Outcomes[strconv.Itoa(resp.StatusCode)+" "+out.Outcome]++
		rep.Latencies = append(rep.Latencies, took)
		if resp.StatusCode == http.StatusAccepted {
			rep.Accepted[out.OrderID] = user
		}
		return nil
	}
	users := make(chan int)
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	for range *conc {
		wg.Go(func() {
			for u := range users {
				user := fmt.Sprintf("user-%d", u)
				key := *run + "-" + user
				var cw sync.WaitGroup
				for range *clicks {
					cw.Go(func() {
						if err := click(user, key); err != nil {
							errOnce.Do(func() { firstErr = err })
						}
					})
				}
				if u%5 == 0 {
					cw.Go(func() {
						time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
						if err := click(user, key+"-reload"); err != nil {
							errOnce.Do(func() { firstErr = err })
						}
					})
				}
				cw.Wait()
			}
		})
	}
	for u := *from; u < *to; u++ {
		users <- u
	}
	close(users)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return json.NewEncoder(stdout).Encode(rep)
}

// lockedWriter serialises the writes of the buyer processes' stderr.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
