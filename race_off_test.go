//go:build !race

package dlock_test

// raceOn tells whether the tests run with the race detector, under which
// sync.Pool drops a share of what is put back, so that more is allocated.
const raceOn = false
