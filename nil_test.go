package dlock_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestNilReceivers: every exported method of every type, called on a nil
// receiver and on a zero value, returns an error (or, for methods that return
// none, a zero value or a closed channel) and never panics or blocks.
func TestNilReceivers(t *testing.T) {
	t.Parallel()
	errType := reflect.TypeFor[error]()
	receivers := []any{
		(*dlock.Client)(nil), &dlock.Client{},
		(*dlock.Mutex)(nil), &dlock.Mutex{},
		(*dlock.FairMutex)(nil), &dlock.FairMutex{},
		(*dlock.RWMutex)(nil), &dlock.RWMutex{},
		(*dlock.Semaphore)(nil), &dlock.Semaphore{},
		(*dlock.CountDownLatch)(nil), &dlock.CountDownLatch{},
		(*dlock.MultiLock)(nil), &dlock.MultiLock{},
		(*dlock.Lease)(nil), &dlock.Lease{},
		(*dlock.MultiLease)(nil), &dlock.MultiLease{},
	}
	for _, r := range receivers {
		v := reflect.ValueOf(r)
		for i := range v.NumMethod() {
			m := v.Method(i)
			name := v.Type().String() + "." + v.Type().Method(i).Name
			if !v.IsNil() && v.Elem().IsZero() {
				name = "zero " + name
			}
			n := m.Type().NumIn()
			if m.Type().IsVariadic() {
				n-- // no options
			}
			args := make([]reflect.Value, n)
			for j := range args {
				args[j] = argFor(m.Type().In(j))
			}
			done := make(chan []reflect.Value, 1)
			go func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s panicked: %v", name, p)
						done <- nil
					}
				}()
				done <- m.Call(args)
			}()
			var out []reflect.Value
			select {
			case out = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s blocked", name)
			}
			for _, o := range out {
				switch {
				case o.Type() == errType && o.IsNil():
					t.Errorf("%s returned no error", name)
				case o.Type().Kind() == reflect.Chan:
					select {
					case <-o.Interface().(<-chan struct{}):
					default:
						t.Errorf("%s returned an open channel", name)
					}
				}
			}
			for _, o := range out {
				if c, ok := o.Interface().(context.Context); ok && c.Err() == nil {
					t.Errorf("%s returned a live context", name)
				}
			}
		}
	}
}

// argFor returns an argument of type t that a caller could pass: a live
// context, a function that does nothing, a small number, a name.
func argFor(t reflect.Type) reflect.Value {
	switch {
	case t == reflect.TypeFor[context.Context]():
		return reflect.ValueOf(context.Background())
	case t.Kind() == reflect.Func:
		return reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, t.NumOut())
			for i := range out {
				out[i] = reflect.Zero(t.Out(i))
			}
			return out
		})
	case t.Kind() == reflect.Int64:
		return reflect.ValueOf(int64(1)).Convert(t)
	case t.Kind() == reflect.String:
		return reflect.ValueOf("x").Convert(t)
	case t.Kind() == reflect.Slice:
		return reflect.MakeSlice(t, 1, 1)
	}
	return reflect.Zero(t)
}
