package dlock

import "sync"

// dispatcher runs hook calls that come from the Client's background work
// (renewals, deadline timers) on a goroutine of its own, one at a time and in
// the order they came, so that a slow hook delays no renewal. The goroutine
// runs while there are calls to make; close waits for it.
type dispatcher struct {
	mu      sync.Mutex
	queue   []func()
	running bool
	closed  bool
	idle    *sync.Cond // signalled when running turns false
}

// post queues f. After close, f runs on the caller's goroutine.
func (d *dispatcher) post(f func()) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		f()
		return
	}
	d.queue = append(d.queue, f)
	if !d.running {
		d.running = true
		go d.run()
	}
	d.mu.Unlock()
}

func (d *dispatcher) run() {
	for {
		d.mu.Lock()
		batch := d.queue
		d.queue = nil
		if len(batch) == 0 {
			d.running = false
			if d.idle != nil {
				d.idle.Broadcast()
			}
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		for _, f := range batch {
			f()
		}
	}
}

// close waits until every queued call has been made.
func (d *dispatcher) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.idle == nil {
		d.idle = sync.NewCond(&d.mu)
	}
	for d.running {
		d.idle.Wait()
	}
}
