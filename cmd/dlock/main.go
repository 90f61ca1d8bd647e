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
// --cluster), with TLS for a rediss:// URL or --tls (--tls-ca-cert,
// --tls-cert, --tls-key, --tls-insecure), logs in as REDIS_USERNAME with
// REDIS_PASSWORD if set, and
// looks at the keys under --prefix, which DLOCK_PREFIX sets for every
// command (default "dlock:", the library's).
//
// Flags go before or after a command's arguments ("dlock inspect order:42
// -json"); "--" ends them. Run "dlock <command> -h" for the flags of a
// command.
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
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
		return helpOK("dlock ls", runLs(ctx, rest, stdout, stderr))
	case "inspect":
		return helpOK("dlock inspect", runInspect(ctx, rest, stdout))
	case "watch":
		return helpOK("dlock watch", runWatch(ctx, rest, stdout, stderr))
	case "release":
		return helpOK("dlock release", runRelease(ctx, rest, stdin, stdout))
	case "permits":
		return helpOK("dlock permits", runPermits(ctx, rest, stdout))
	case "leader":
		return helpOK("dlock leader", runLeader(ctx, rest, stdout))
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
Sentinel addresses with --master, Cluster addresses with --cluster), with
TLS for a rediss:// URL or --tls (--tls-ca-cert for a private CA), log in as
REDIS_USERNAME with REDIS_PASSWORD if they are set, and look at the keys
under --prefix, which DLOCK_PREFIX sets for every command (default "dlock:").

Flags go before or after a command's arguments; -- ends them.
Run 'dlock <command> -h' for the flags of a command.
`)
}

// helpOK turns the flag.ErrHelp of a command's -h, whose usage is printed
// already, into success, and adds to the error of the command cmd what to do
// about it, where dlock knows.
func helpOK(cmd string, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return authHint(cmd+": Redis", tlsHint(err), loginHint)
}

// The ways to give a password, for the hint of a refused login: every
// command but demo reads the environment; demo, the URL only.
const (
	loginHint     = "set REDIS_PASSWORD, and REDIS_USERNAME for an ACL user, or give them in the --redis URL: redis://:PASSWORD@host:6379, redis://USER:PASSWORD@host:6379"
	demoLoginHint = "give it in the --redis URL: redis://:PASSWORD@host:6379, redis://USER:PASSWORD@host:6379 for an ACL user"
)

// authHint replaces err, if it is Redis refusing a client that gave no
// password or a wrong one (NOAUTH, WRONGPASS, or the protocol error Redis
// answers a long request of such a client with), by an error that says so
// and how to give one (how), starting with who ("dlock ls: Redis") and
// ending with Redis's own words. The library says the same of its go-redis
// options, which a user of the command does not set. The new error wraps
// err.
func authHint(who string, err error, how string) error {
	r, ok := errors.AsType[redis.Error](err)
	if !ok {
		return err
	}
	msg := r.Error()
	if !strings.HasPrefix(msg, "NOAUTH") && !strings.HasPrefix(msg, "WRONGPASS") && !strings.Contains(msg, "unauthenticated") {
		return err
	}
	return &hinted{msg: fmt.Sprintf("%s refuses the connection: no password or a wrong one (%s): %s", who, how, msg), err: err}
}

// hinted is an error told anew, with what to do about it.
type hinted struct {
	msg string
	err error
}

func (e *hinted) Error() string { return e.msg }
func (e *hinted) Unwrap() error { return e.err }

// tlsHint adds to err, if the server's certificate was refused, what to do.
func tlsHint(err error) error {
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return fmt.Errorf("%w (the server's certificate is signed by a CA this host does not trust: give that CA's certificate with --tls-ca-cert FILE)", err)
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return fmt.Errorf("%w (the server's certificate does not name the address in --redis: connect by a name it has)", err)
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
