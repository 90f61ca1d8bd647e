package dlockvalkey

// The package is dlockrueidis's with valkey-go's names (internal/clientgen).
//go:generate go run ../internal/clientgen/gen
