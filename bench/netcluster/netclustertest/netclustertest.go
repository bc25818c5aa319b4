// Package netclustertest starts bench/netcluster's clusters for tests.
package netclustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/gorun/gorun/bench/netcluster"
)

// Start starts the cluster cfg describes, named from prefix and this
// process's id (cfg.Name is ignored), and removes it when the test ends.
// Where network namespaces cannot be made (no root, no iproute2) the test
// is skipped saying why, except under CI (CI=true), which installs
// iproute2 and runs as root: there it fails, so that the tests that need
// hosts cannot pass by not running.
func Start(ctx context.Context, t testing.TB, prefix string, cfg netcluster.Config) *netcluster.Cluster {
	t.Helper()
	cfg.Name = fmt.Sprintf("%s%d", prefix, os.Getpid()%1000)
	c, err := netcluster.Start(ctx, cfg)
	if errors.Is(err, netcluster.ErrNoNamespaces) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
