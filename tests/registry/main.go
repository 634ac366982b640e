// The CNCF distribution registry with only what the tests use: the
// filesystem storage driver and htpasswd (basic) authentication. The same
// command as github.com/distribution/distribution/v3/cmd/registry, without
// its cloud storage drivers (a quicker build).
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// Exits non-zero by itself when `serve` fails.
	// nolint:errcheck
	registry.RootCmd.Execute()
}
