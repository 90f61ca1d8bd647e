# Shortcuts for the commands in README.md.
.PHONY: test bench demo vet

test:
	go test -race -count=1 -p 1 ./...

bench:
	go test -run '^$$' -bench . -benchtime 2s -count 3 .

demo:
	go run ./cmd/dlock demo

vet:
	gofmt -l . && go vet ./...
