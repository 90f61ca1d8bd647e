package gocronlock

import (
	"fmt"
	"time"

	"github.com/go-co-op/gocron/v2"
)

// AlignedStart returns a gocron.JobOption that starts a
// gocron.DurationJob of the given interval on a whole multiple of the
// interval (counted from Go's zero time, in UTC: every minute on the minute;
// every 5 minutes at :00, :05, :10...): the job fires on each such instant
// from the first one the scheduler has not yet passed. Give it the job's own
// interval:
//
//	s.NewJob(gocron.DurationJob(5*time.Minute), task, gocronlock.AlignedStart(5*time.Minute))
//
// A DurationJob fires every interval from when it started, so instances
// whose schedulers started at different times fire each tick at different
// instants, and a Locker runs a tick again in an instance that fires it
// more than the min hold after another. Started with AlignedStart, every
// instance fires each tick at the same instant, as far as their clocks
// agree. A gocron.CronJob needs no such option: it fires on the clock.
//
// The instant is taken from the scheduler's clock (gocron.WithClock) when
// the job is added. A non-positive interval makes NewJob return an error.
func AlignedStart(interval time.Duration) gocron.JobOption {
	return gocron.WithStartAt(startAt(gocron.WithStartDateTimePast, func(now time.Time) (time.Time, error) {
		if interval <= 0 {
			return time.Time{}, fmt.Errorf("gocronlock: AlignedStart(%v): the interval must be positive", interval)
		}
		// A start in the past is moved on by whole intervals, to the
		// first one not before now.
		return now.Truncate(interval), nil
	}))
}

// startAt returns a start option like the one from, with the start that
// start computes from the scheduler's clock when the job is added. gocron's
// option types take a job type of gocron's own, which only type inference
// can name here: O is gocron.StartAtOption.
func startAt[O ~func(J, time.Time) error, J any](from func(time.Time) O, start func(now time.Time) (time.Time, error)) O {
	return func(j J, now time.Time) error {
		t, err := start(now)
		if err != nil {
			return err
		}
		return from(t)(j, now)
	}
}
