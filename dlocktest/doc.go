// Package dlocktest helps test code that uses dlock: what it does when its
// lock is lost mid-work, when Redis cannot be reached, when a reply never
// comes. Everything runs against a real Redis (or Valkey) server started for
// the test; nothing is mocked.
//
//   - NewServer starts a private server for one test, with a dlock Client
//     for it.
//   - Lose and Steal take a held lease away in Redis (the lock freed, or
//     held by another owner with a higher fence) and return once the
//     lease's Done is closed, so that the test can look at what its code
//     did next, without waiting for a renewal.
//   - NewFaults puts a switch between a Client and its server that cuts the
//     connection, pauses it, or loses the reply to one request.
//
// The server binary is the one the environment variable DLOCK_REDIS_SERVER
// names (a name on PATH or a path, "valkey-server" say), by default
// redis-server on PATH. Where none is installed, NewServer fails the test
// saying what to install; with DLOCKTEST_SKIP_WITHOUT_SERVER=1 in the
// environment it skips the test instead.
//
// Every function takes the test's testing.TB, reports what goes wrong with
// its Fatal, and stops what it started when the test ends (Cleanup). Since
// Fatal must be called from the test's own goroutine, so must these
// functions. A nil testing.TB has no test to fail: the function writes why
// to standard error and does nothing.
//
// docs/testing.md in the repository walks through whole tests: a job that
// stops when its lease is lost, a lockhttp handler's busy answer, an
// Election's leader stepping down; it also says which dlock calls fail on
// miniredis and why.
package dlocktest
