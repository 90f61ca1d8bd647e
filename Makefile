# Shortcuts for the commands in README.md.
.PHONY: test bench bench-quick microbench demo vet

test:
	go test -race -count=1 -p 1 ./...

# dlock next to redsync, redislock, rueidislock and raw go-redis, in one run on
# a private redis-server: bench/results/full.md, latest.json and latest.svg.
bench:
	cd bench && go run . -out results/full.md

bench-quick:
	cd bench && go run . -quick -out results/quick.md

# The in-package Go benchmarks (dlock and a raw go-redis floor only).
microbench:
	go test -run '^$$' -bench . -benchtime 2s -count 3 .

demo:
	go run ./cmd/dlock demo

vet:
	gofmt -l . && go vet ./... && cd bench && go vet ./...
