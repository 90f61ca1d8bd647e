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
