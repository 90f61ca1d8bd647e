package dlock_test

const workerEnv = "DLOCK_TEST_WORKER"

func runWorker(role string) int { return 2 }
