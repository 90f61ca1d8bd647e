package idgen_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/dlock-go/dlock/idgen"
	"github.com/redis/go-redis/v9"
)

// The examples run against the redis-server at REDIS_ADDR (the tests start
// one of their own and set it) and check what they print.

func ExampleGenerator_Next() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	g, err := idgen.New(rdb, "order") // one per name and process, shared
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	a, err := g.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	b, err := g.Next(ctx) // from the same block: no round trip
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("increasing:", b > a)
	fmt.Println("same second:", idgen.Second(a).Equal(idgen.Second(b)), "next in it:", idgen.Sequence(b) == idgen.Sequence(a)+1)
	// Output:
	// increasing: true
	// same second: true next in it: true
}
