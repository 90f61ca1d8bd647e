package redistest

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Queue writes n live waiters into the queue of the dlock lock called name
// (default prefix "dlock:"), as the acquire scripts would register them: in
// arrival order from now, each lapsing an hour after now. kind is "Mutex",
// "FairMutex", "Semaphore" (each waiter wants 1 permit), "RWMutex readers" or
// "RWMutex writers". The owner ids, "w<i>:1", are of Clients that do not
// exist: a grant or a message to one goes unanswered. For tests and
// benchmarks of long queues.
func Queue(ctx context.Context, rdb *redis.Client, kind, name string, n int, now time.Time) error {
	owners := make([]redis.Z, n)
	for i := range owners {
		owners[i] = redis.Z{Score: float64(now.UnixMicro() + int64(i)), Member: "w" + strconv.Itoa(i) + ":1"}
	}
	lapse := strconv.FormatInt(now.Add(time.Hour).UnixMilli(), 10)
	alive := func(tag, rest string) error {
		if err := rdb.ZAdd(ctx, tag+":waiters", owners...).Err(); err != nil {
			return err
		}
		m := make(map[string]any, n)
		for _, o := range owners {
			m[o.Member.(string)] = lapse + rest
		}
		return rdb.HSet(ctx, tag+":alive", m).Err()
	}
	switch kind {
	case "Mutex":
		return alive("dlock:{"+name+"}", "|100") // each with a grant lease of 100ms
	case "FairMutex":
		return alive("dlock:fair:{"+name+"}", "|100")
	case "Semaphore":
		return alive("dlock:sem:{"+name+"}", "|1")
	case "RWMutex readers":
		return alive("dlock:rw:{"+name+"}", "|r")
	case "RWMutex writers":
		if err := alive("dlock:rw:{"+name+"}", "|w"); err != nil {
			return err
		}
		return rdb.ZAdd(ctx, "dlock:rw:{"+name+"}:writers", owners...).Err()
	}
	return fmt.Errorf("redistest.Queue: no kind %q", kind)
}
