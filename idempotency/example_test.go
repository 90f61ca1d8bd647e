package idempotency_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/idempotency"
	"github.com/dlock-go/dlock/lockhttp"
	"github.com/redis/go-redis/v9"
)

// The examples run against the redis-server at REDIS_ADDR (the tests start
// one of their own and set it) and check what they print.

// A client that sends "submit order" twice with one Idempotency-Key gets
// one order: the second request is answered with the first one's response.
func ExampleStore_Middleware() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	store, err := idempotency.New(c, rdb)
	if err != nil {
		log.Fatal(err)
	}

	var orders atomic.Int64
	submit := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := orders.Add(1) // place the order
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", n)
	})
	srv := httptest.NewServer(store.Middleware(submit))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", nil)
		req.Header.Set(idempotency.Header, "checkout-7f3a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body), "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	fmt.Println("orders made:", orders.Load())
	// Output:
	// 201 order 1 replayed: false
	// 201 order 1 replayed: true
	// orders made: 1
}

// The two middlewares composed: the idempotency key makes a repeated
// request replay the first one's response, and lockhttp runs one request per
// user at a time, answering 409 with Retry-After to a second user's request
// while the first runs. A 409 is not stored: the key runs when sent again.
func ExampleStore_Middleware_lockhttp() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	store, err := idempotency.New(c, rdb)
	if err != nil {
		log.Fatal(err)
	}

	var orders atomic.Int64
	inside, leave := make(chan struct{}), make(chan struct{})
	submit := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(idempotency.Header) == "order-a" {
			close(inside) // the first request holds the user's lock ...
			<-leave       // ... until the second has been answered
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders.Add(1))
	})
	byUser := func(r *http.Request) (string, error) { return "user:" + r.Header.Get("User"), nil }
	h := store.Middleware(lockhttp.Handler(c, byUser, submit, lockhttp.NoWait()))
	srv := httptest.NewServer(h)
	defer srv.Close()

	post := func(key string) string {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", nil)
		req.Header.Set("User", "u7")
		req.Header.Set(idempotency.Header, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusConflict {
			return fmt.Sprint(resp.StatusCode, " retry after ", resp.Header.Get("Retry-After"))
		}
		return fmt.Sprint(resp.StatusCode, " ", string(body))
	}
	first := make(chan string)
	go func() { first <- post("order-a") }()
	<-inside
	fmt.Println("b while a runs:", post("order-b"))
	close(leave)
	fmt.Println("a:", <-first)
	fmt.Println("b again:", post("order-b"))
	fmt.Println("a again:", post("order-a"))
	// Output:
	// b while a runs: 409 retry after 1
	// a: 201 order 1
	// b again: 201 order 2
	// a again: 201 order 1
}
