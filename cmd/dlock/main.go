// Command dlock is the command-line companion of the dlock library.
//
// Usage:
//
//	dlock <command> [flags]
//
// The commands are:
//
//	demo    run a flash sale across several OS processes sharing one Redis, once
//	        with no lock, once with an in-process mutex and once with dlock, and
//	        compare what was sold
//
// Run "dlock <command> -h" for the flags of a command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// run runs the command line args (without the program name), writing results
// to stdout and diagnostics to stderr. An error matching *usageError means the
// command line itself was wrong.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// dlock reports its own errors, saying what it was doing; the Redis
	// client's log line for every failed dial would only bury them.
	redis.SetLogger(discardLogger{})
	if len(args) == 0 {
		printUsage(stderr)
		return usagef("dlock: no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "-help", "--help", "help":
		printUsage(stdout)
		return nil
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
	case workerCommand: // hidden: started by demo, never by hand
		return runWorker(ctx, rest, os.Stdin, stdout)
	}
	return usagef("dlock: unknown command %q (run 'dlock -h' for the list)", cmd)
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: dlock <command> [flags]

Commands:
  demo    run a flash sale across several OS processes sharing one Redis:
          no lock, an in-process mutex, and dlock; compare what was sold

Run 'dlock <command> -h' for the flags of a command.
`)
}

// usageError is a mistake in the command line: main exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCode prints err, if any, to stderr and returns the exit status for it:
// 0 for none, 2 for a usage error, 1 for any other.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, err)
	if _, ok := errors.AsType[*usageError](err); ok {
		return 2
	}
	return 1
}

// discardLogger is a go-redis logger that logs nothing.
type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
