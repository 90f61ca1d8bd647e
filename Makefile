# Shortcuts for the commands in README.md.
.PHONY: fast test servers faults chaos failover bench bench-quick microbench demo vet readme

# The fast tier: what one plain redis-server proves in about two minutes.
fast:
	go test -short -race -count=1 -parallel 8 ./... ./dlocktest/miniredis/... ./otel/... ./examples/flashsale/... ./gocronlock/... ./dlockrueidis/... ./dlockvalkey/...

test:
	go test -race -count=1 -p 1 -parallel 4 -timeout 20m ./... ./dlocktest/miniredis/... ./otel/... ./examples/flashsale/... ./gocronlock/... ./dlockrueidis/... ./dlockvalkey/...

# The fast tier and the promise-level suite on the newer servers, Redis 8.0,
# Valkey 8.1 and Valkey 9.1, fetched from Debian's trixie and sid into
# ~/.cache/dlock-servers by .ci/servers (about 20 s the first time). About two
# minutes a server.
servers:
	.ci/servers | while read -r name path; do echo "== $$name"; \
	  DLOCK_REDIS_SERVER=$$path go test -short -race -count=1 -parallel 8 ./... && \
	  DLOCK_REDIS_SERVER=$$path go test -race -count=1 -run '^TestPromises' . && \
	  { [ "$$name" != valkey-9.1 ] || DLOCK_REDIS_SERVER=$$path DLOCK_PLAIN_REQUIRED=1 \
	    go test -race -count=1 -run '^(TestPlain|TestWithoutScripts|TestPromisesWithoutScripts)' . ./dlockrueidis/... ./dlockvalkey/... && \
	    DLOCK_REDIS_SERVER=$$path DLOCK_PLAIN_REQUIRED=1 go test -race -count=1 -run '^TestLeaseContract$$/^Mutex_WithoutScripts$$' .; } || exit 1; done

# The fault matrix: every request kind dlock sends, crossed with a lost
# reply, a first copy delivered late (after its owner's next request, or
# another owner's acquire) and a request dropped, and with the steps after
# it that matter, each cell through a fault proxy on a real server; prints
# the matrix. The ordinary suite runs a subset. About a minute per server.
faults:
	bash -o pipefail -c "DLOCK_FAULTS=all go test -race -run TestFaultMatrix -count=1 -timeout 30m -v . | grep -v '^redis: ' | grep -E '^(---|ok|FAIL|PASS)|fault matrix|^ +\\|'"
	bash -o pipefail -c "DLOCK_FAULTS=all DLOCK_REDIS_SERVER=valkey-server go test -race -run TestFaultMatrix -count=1 -timeout 30m -v . | grep -v '^redis: ' | grep -E '^(---|ok|FAIL|PASS)|fault matrix|^ +\\|'"

# Worker processes of each kind (Mutex, FairMutex, batched Mutexes, RWMutex,
# Semaphore, Election) take one lock through a fault proxy that loses, delays
# and holds back requests and replies, cuts, refuses and pauses connections,
# while Redis restarts empty and the holder's process is stopped past its
# TTL. From the history: the fence rejects every stale write, no section
# whose Unlock returned nil overlapped another holder's, and no name is held
# a TTL after the end. Then broken variants (a renewal, an Unlock that hides a
# loss, a hold left behind), which the checks must catch. About 8 minutes;
# DLOCK_CHAOS_FOR=10m make chaos for a longer soak.
chaos:
	bash -o pipefail -c "go test -race -tags chaos -run TestChaos -count=1 -timeout 60m -v . | grep -v '^redis: '"

# 100 failovers with and without WithWaitReplicas(1) on a Sentinel set-up:
# each round a Client acquires while the replicas lag, the primary is killed,
# a lagging replica is promoted and another Client tries the lock; prints the
# grants, refusals and double grants. Then 100 rounds in which the replica
# that acknowledged dies with the primary. Then 10 rounds of each test that
# the suite runs with one failover or a few restarts: a holder told of a lock
# lost in a lossy failover (Sentinel and Cluster) and fences rising across
# restarts; and 10 rounds of each Election failover test (a leader whose grant
# a Cluster failover lost, a leader that keeps leading across a Sentinel
# failover with WithWaitReplicas). About 40 minutes.
failover:
	bash -o pipefail -c "DLOCK_FAILOVER_ROUNDS=100 go test -race -run 'TestSentinelWait(Rounds|NotConsensus)' -count=1 -timeout 90m -v . | grep -v '^redis: '"
	bash -o pipefail -c "DLOCK_FAILOVER_ROUNDS=10 go test -race -run 'Test(SentinelLossyFailover|ClusterLossyFailoverFences|SentinelRestartFences)$$' -count=1 -timeout 30m -v . | grep -v '^redis: '"
	bash -o pipefail -c "DLOCK_FAILOVER_ROUNDS=10 go test -race -run 'TestElection(Cluster|Sentinel)Failover$$' -count=1 -timeout 30m -v . | grep -v '^redis: '"

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

# Copies examples/quickstart/main.go into README.md between its markers; a test
# (TestREADME) fails when the two differ.
readme:
	go test -count=1 -run '^TestREADME$$' ./examples/quickstart -update

vet:
	gofmt -l . && go vet ./... ./dlocktest/miniredis/... ./otel/... ./examples/flashsale/... ./gocronlock/... ./dlockrueidis/... ./dlockvalkey/... && cd bench && go vet ./...
