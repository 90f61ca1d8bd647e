module github.com/dlock-go/dlock/dlockvalkey

go 1.26.0

require (
	github.com/dlock-go/dlock v0.0.0
	github.com/valkey-io/valkey-go v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/dlock-go/dlock => ../
