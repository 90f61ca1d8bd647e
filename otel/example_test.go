package dlockotel_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/dlock-go/dlock"
	dlockotel "github.com/dlock-go/dlock/otel"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The example runs against the redis-server at REDIS_ADDR (the tests start
// one of their own and set it) and checks what it prints.

func ExampleHooks() {
	// The providers of the application, with their exporters; here, a
	// reader and a recorder that keep what they get, to print it below.
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
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

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "dlock.lock.acquire.duration" || m.Name == "dlock.lock.hold.duration" {
				fmt.Println(m.Name, m.Unit)
			}
		}
	}
	for _, s := range spans.Ended() {
		fmt.Println(s.Name(), s.Status().Code)
	}
	// Output:
	// dlock.lock.acquire.duration s
	// dlock.lock.hold.duration s
	// dlock lock Unset
	// dlock unlock Unset
}
