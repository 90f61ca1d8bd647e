package lockhttp_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lockhttp"
	"github.com/redis/go-redis/v9"
)

// The examples run against the redis-server at REDIS_ADDR (the tests start
// one of their own and set it) and check what they print.

// Refunds of one order run one at a time across every instance of the
// service: the handler runs under the lock "refund:<order>", with the lease
// (and its fence) in its context.
func ExampleHandler() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	refund := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, _ := lockhttp.FromContext(r.Context())
		// ... refund the order, passing l.Fence() to the payment service ...
		fmt.Fprintln(w, "refunded, fenced:", l.Fence() > 0)
	})
	byOrder := func(r *http.Request) (string, error) { return "refund:" + r.PathValue("order"), nil }
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/refund", lockhttp.Handler(c, byOrder, refund))

	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/orders/42/refund", "", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Print(resp.StatusCode, " ")
	body := make([]byte, 64)
	n, _ := resp.Body.Read(body)
	fmt.Print(string(body[:n]))
	// Output: 200 refunded, fenced: true
}
