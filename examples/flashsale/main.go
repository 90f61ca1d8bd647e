// Command flashsale is an example service on Redis and PostgreSQL built from
// dlock's flash-sale parts: a sale's stock sold by one script (package
// stock), order ids (idgen), duplicate submissions answered once
// (idempotency), and a consumer group that turns order intents into rows in
// PostgreSQL (orders).
//
//	go run ./examples/flashsale serve            # the HTTP service on :8080
//	go run ./examples/flashsale loadtest -json   # buyers in several processes, then the database checked
//
// Both use the Redis at 127.0.0.1:6379 and the PostgreSQL database
// postgres://127.0.0.1:5432/test; -redis and -pg (or FLASHSALE_REDIS and
// FLASHSALE_PG) name others.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "flashsale:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

const usage = `usage: flashsale serve [flags] | loadtest [flags]
  serve     the HTTP service: POST /sales, POST /sales/{id}/orders (Idempotency-Key), GET /orders/{id}
  loadtest  a sale, buyers in several OS processes clicking more than once, then the database checked`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "serve":
		return serveCmd(ctx, args[1:], stdout, stderr)
	case "loadtest":
		return loadtestCmd(ctx, args[1:], stdout, stderr)
	case buyerCmdName:
		return buyerCmd(ctx, args[1:], stdout)
	}
	fmt.Fprintln(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// env returns the environment variable name, or def.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var (
	defaultRedis = env("FLASHSALE_REDIS", "redis://127.0.0.1:6379")
	defaultPG    = env("FLASHSALE_PG", "postgres://127.0.0.1:5432/test?sslmode=disable")
)
