package stock_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/dlock-go/dlock/idgen"
	"github.com/dlock-go/dlock/stock"
	"github.com/redis/go-redis/v9"
)

// The examples run against the redis-server at REDIS_ADDR (the tests start
// one of their own and set it) and check what they print.

// A sale of two items: the first click of a user orders, a second click of
// the same user gets that user's order back, and a third user finds the
// stock sold out.
func ExampleSales_Buy() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	ids, err := idgen.New(rdb, "order")
	if err != nil {
		log.Fatal(err)
	}
	sales, err := stock.New(rdb, ids)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := sales.Create(ctx, "voucher-9", 2, time.Hour); err != nil {
		log.Fatal(err)
	}
	defer sales.Delete(ctx, "voucher-9")

	for _, user := range []string{"ann", "ann", "bob", "cid"} {
		r, err := sales.Buy(ctx, "voucher-9", user, 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(user, r.Outcome, "left:", r.Left)
	}
	// Output:
	// ann ordered left: 1
	// ann already ordered left: 1
	// bob ordered left: 0
	// cid sold out left: 0
}
