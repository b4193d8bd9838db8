package e2e

import (
	"os"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// newExec is the exec a CNIConfig uses, given up front: libcni creates a
// missing one lazily on each call without locking, a data race when tests
// call one CNIConfig from many goroutines (go test -race).
func newExec() invoke.Exec {
	return &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
}
