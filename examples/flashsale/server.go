package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/examples/flashsale/orders"
	"github.com/dlock-go/dlock/idempotency"
	"github.com/dlock-go/dlock/idgen"
	"github.com/dlock-go/dlock/stock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// consumersPerSale is how many consumers of a sale's stream each service
// process runs.
const consumersPerSale = 2

// service is the HTTP service and the consumers of its sales.
type service struct {
	rdb   *redis.Client
	db    *pgxpool.Pool
	locks *dlock.Client
	sales *stock.Sales
	idem  *idempotency.Store
	name  string // this process, in consumer names

	ctx    context.Context // ends the consumers
	cancel context.CancelFunc
	mu     sync.Mutex
	run    map[string]bool // sales whose consumers run here
	wg     sync.WaitGroup
}

func newService(ctx context.Context, redisURL, pgURL string) (*service, error) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %w", redisURL, err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("Redis at %s: %w", opt.Addr, err)
	}
	db, err := pgxpool.New(ctx, pgURL)
	if err == nil {
		err = orders.Migrate(ctx, db)
	}
	if err != nil {
		_ = rdb.Close()
		if db != nil {
			db.Close()
		}
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	s := &service{rdb: rdb, db: db, name: fmt.Sprintf("%s-%d", hostname(), os.Getpid()), run: map[string]bool{}}
	ids, _ := idgen.New(rdb, "order")
	s.sales, _ = stock.New(rdb, ids)
	if s.locks, err = dlock.New(rdb); err != nil {
		s.close()
		return nil, err
	}
	if s.idem, err = idempotency.New(s.locks, rdb); err != nil {
		s.close()
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// The sales this database knows are served by this process too.
	rows, err := db.Query(ctx, `SELECT id FROM sales`)
	if err == nil {
		var ids []string
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				ids = append(ids, id)
			}
		}
		rows.Close()
		for _, id := range ids {
			s.consume(id)
		}
	}
	return s, nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "flashsale"
	}
	return h
}

// consume starts this process's consumers of sale, once.
func (s *service) consume(sale string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run[sale] || s.ctx.Err() != nil {
		return
	}
	s.run[sale] = true
	for i := range consumersPerSale {
		c := &orders.Consumer{RDB: s.rdb, DB: s.db, Sales: s.sales, Sale: sale, Name: fmt.Sprintf("%s-%d", s.name, i)}
		s.wg.Go(func() { _, _ = c.Run(s.ctx) })
	}
}

func (s *service) close() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.locks != nil {
		_ = s.locks.Close()
	}
	s.db.Close()
	_ = s.rdb.Close()
}

// handler routes the service's requests.
func (s *service) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sales", s.createSale)
	mux.HandleFunc("GET /sales/{id}", s.sale)
	mux.Handle("POST /sales/{id}/orders", s.idem.Middleware(http.HandlerFunc(s.buy), idempotency.RequireKey()))
	mux.HandleFunc("GET /orders/{id}", s.order)
	return mux
}

// maxBody bounds every request body.
const maxBody = 1 << 16

// decode reads a JSON body into v, refusing unknown fields and trailing data.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		reply(w, http.StatusBadRequest, map[string]string{"error": "malformed body: " + err.Error()})
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		reply(w, http.StatusBadRequest, map[string]string{"error": "malformed body: more than one JSON value"})
		return false
	}
	return true
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type createReq struct {
	ID    string `json:"id"`
	Stock int64  `json:"stock"`
	TTLs  int64  `json:"ttl_s"` // default a day
}

func (s *service) createSale(w http.ResponseWriter, r *http.Request) {
	var req createReq
	if !decode(w, r, &req) {
		return
	}
	ttl := 24 * time.Hour
	if req.TTLs > 0 {
		ttl = time.Duration(req.TTLs) * time.Second
	}
	if req.ID == "" || len(req.ID) > stock.MaxIDLen || req.Stock < 0 || req.TTLs < 0 {
		reply(w, http.StatusBadRequest, map[string]string{"error": "want an id of 1 to 256 bytes, a stock of 0 or more and a TTL of 0 (a day) or more seconds"})
		return
	}
	if err := orders.CreateSale(r.Context(), s.db, s.sales, req.ID, req.Stock, ttl); err != nil {
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.consume(req.ID)
	reply(w, http.StatusCreated, map[string]any{"id": req.ID, "stock": req.Stock})
}

func (s *service) sale(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	left, err := s.sales.Left(r.Context(), id)
	switch {
	case errors.Is(err, stock.ErrNoSuchSale):
		reply(w, http.StatusNotFound, map[string]string{"error": "no such sale"})
		return
	case err != nil:
		reply(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	var dbStock, sold int64
	_ = s.db.QueryRow(r.Context(), `SELECT stock, (SELECT count(*) FROM orders WHERE sale = $1) FROM sales WHERE id = $1`, id).Scan(&dbStock, &sold)
	reply(w, http.StatusOK, map[string]any{"id": id, "left": left, "stock_in_db": dbStock, "orders_in_db": sold})
}

type buyReq struct {
	User string `json:"user"`
	N    int64  `json:"n"`
}

// buyReply is the answer to a buy.
type buyReply struct {
	Outcome string `json:"outcome"`
	OrderID string `json:"order_id,omitempty"` // a string: 64-bit ids lose digits in JavaScript
	Left    int64  `json:"left"`
}

func (s *service) buy(w http.ResponseWriter, r *http.Request) {
	var req buyReq
	if !decode(w, r, &req) {
		return
	}
	if req.N == 0 {
		req.N = 1
	}
	res, err := s.sales.Buy(r.Context(), r.PathValue("id"), req.User, req.N)
	if err != nil {
		var status int
		if r.Context().Err() != nil {
			return
		}
		status = http.StatusBadRequest
		if errors.Is(err, context.DeadlineExceeded) || isRedisFailure(err) {
			status = http.StatusServiceUnavailable
		}
		reply(w, status, map[string]string{"error": err.Error()})
		return
	}
	out := buyReply{Outcome: res.Outcome.String(), Left: res.Left}
	if res.OrderID != 0 {
		out.OrderID = strconv.FormatInt(res.OrderID, 10)
	}
	switch res.Outcome {
	case stock.Ordered:
		reply(w, http.StatusAccepted, out)
	case stock.AlreadyOrdered:
		reply(w, http.StatusConflict, out)
	case stock.SoldOut:
		reply(w, http.StatusGone, out)
	default:
		reply(w, http.StatusNotFound, out)
	}
}

// isRedisFailure tells a failure to reach Redis from bad input.
func isRedisFailure(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, redis.ErrClosed)
}

func (s *service) order(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		reply(w, http.StatusBadRequest, map[string]string{"error": "an order id is a positive integer"})
		return
	}
	o, err := orders.Status(r.Context(), s.db, id)
	switch {
	case errors.Is(err, orders.ErrNoOrder):
		reply(w, http.StatusNotFound, map[string]string{"error": "no such order (yet: orders are written a moment after they are accepted)"})
	case err != nil:
		reply(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
	default:
		reply(w, http.StatusOK, o)
	}
}

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	redisURL := fs.String("redis", defaultRedis, "Redis URL")
	pgURL := fs.String("pg", defaultPG, "PostgreSQL URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := newService(ctx, *redisURL, *pgURL)
	if err != nil {
		return err
	}
	defer s.close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "flashsale: serving on http://%s (Redis %s, PostgreSQL %s)\n", ln.Addr(), *redisURL, *pgURL)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
