package dlockotel_test

import (
	"context"
	"log"
	"os"

	"github.com/dlock-go/dlock"
	dlockotel "github.com/dlock-go/dlock/otel"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The example needs a Redis server, so it is compiled but not run.

func ExampleHooks() {
	// The providers of the application, with their exporters.
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())

	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	// Without options, Hooks records with the global providers.
	hooks := dlockotel.Hooks(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp))
	c, err := dlock.New(rdb, dlock.WithHooks(hooks))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The spans of the Lock and Unlock that Do makes are children of the
	// span ctx carries, if any.
	ctx := context.Background()
	err = c.Mutex("report:daily").Do(ctx, func(ctx context.Context) error {
		return nil
	})
	if err != nil {
		log.Print(err)
	}
}
