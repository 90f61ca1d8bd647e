// Command dlock is the command-line companion of the dlock library.
//
// Usage:
//
//	dlock <command> [flags]
//
// The commands are:
//
//	demo     run a flash sale across several OS processes sharing one Redis, once
//	         with no lock, once with an in-process mutex and once with dlock, and
//	         compare what was sold
//	ls       list the locks whose names match a pattern: kind, holders, TTL
//	         left, waiters, last fence
//	inspect  print everything about one lock, or -json
//	watch    follow one lock as it changes hands
//	leader   print who leads an election, and the candidates in line
//	release  take a stuck lock from its holders (--force), moving the fence on
//	         and handing it to the next waiter
//	permits  print a Semaphore's total permits and how many are in use, or
//	         set the total for every process at once
//
// ls, inspect and watch only read. Every command but demo reaches Redis at
// --redis (a URL, or Sentinel or Cluster addresses with --master or
// --cluster), logs in as REDIS_USERNAME with REDIS_PASSWORD if set, and
// looks at the keys under --prefix, which DLOCK_PREFIX sets for every
// command (default "dlock:", the library's).
//
// Run "dlock <command> -h" for the flags of a command.
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

	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// run runs the command line args (without the program name), reading answers
// from stdin, writing results to stdout and diagnostics to stderr. An error
// matching *usageError means the command line itself was wrong.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
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
	case "ls":
		return helpOK(runLs(ctx, rest, stdout, stderr))
	case "inspect":
		return helpOK(runInspect(ctx, rest, stdout))
	case "watch":
		return helpOK(runWatch(ctx, rest, stdout, stderr))
	case "release":
		return helpOK(runRelease(ctx, rest, stdin, stdout))
	case "permits":
		return helpOK(runPermits(ctx, rest, stdout))
	case "leader":
		return helpOK(runLeader(ctx, rest, stdout))
	case workerCommand: // hidden: started by demo, never by hand
		return runWorker(ctx, rest, stdin, stdout)
	}
	return usagef("dlock: unknown command %q (run 'dlock -h' for the list)", cmd)
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: dlock <command> [flags]

Commands:
  demo     run a flash sale across several OS processes sharing one Redis:
           no lock, an in-process mutex, and dlock; compare what was sold
  ls       list the locks whose names match a pattern
  inspect  print everything about one lock
  watch    follow one lock as it changes hands
  leader   print who leads an election, and the candidates in line
  release  take a stuck lock from its holders (--force)
  permits  print a Semaphore's total permits, or set it for every process

ls, inspect, watch, release and permits reach Redis at --redis (a URL; or
Sentinel addresses with --master, Cluster addresses with --cluster), log in
as REDIS_USERNAME with REDIS_PASSWORD if they are set, and look at the keys
under --prefix, which DLOCK_PREFIX sets for every command (default "dlock:").

Run 'dlock <command> -h' for the flags of a command.
`)
}

// helpOK turns the flag.ErrHelp of a command's -h, whose usage is printed
// already, into success.
func helpOK(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
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
