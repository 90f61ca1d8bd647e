package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// A cached price expired, and three replicas ask for it at once: one of
// them computes it and fills the cache, the others get its value from
// Redis without computing it. The function looks in the cache first, so a
// replica that missed the cache just before it was filled, and runs the
// function after the fill, computes nothing either.
func ExampleGroup_Do() {
	ctx := context.Background()
	cache := exampleRedis()
	var computed atomic.Int32
	price := func(c *dlock.Client, sku string) (string, error) {
		key := "cache:price:" + sku
		if v, err := cache.Get(ctx, key).Result(); err == nil {
			return v, nil
		} else if !errors.Is(err, redis.Nil) {
			return "", err
		}
		v, _, err := c.Group("prices").Do(ctx, sku, func(ctx context.Context) ([]byte, error) {
			if v, err := cache.Get(ctx, key).Bytes(); err == nil {
				return v, nil // filled meanwhile
			}
			computed.Add(1)
			time.Sleep(100 * time.Millisecond) // the costly part
			v := "19.99"
			return []byte(v), cache.Set(ctx, key, v, time.Minute).Err()
		})
		return string(v), err
	}

	var wg sync.WaitGroup
	for range 3 {
		c := exampleClient() // a replica: a process of its own
		defer c.Close()
		wg.Go(func() {
			v, err := price(c, "sku-42")
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println("sku-42 costs", v)
		})
	}
	wg.Wait()
	fmt.Println("computed", computed.Load(), "time")
	// Output:
	// sku-42 costs 19.99
	// sku-42 costs 19.99
	// sku-42 costs 19.99
	// computed 1 time
}
