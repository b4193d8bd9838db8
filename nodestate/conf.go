package nodestate

import (
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// ConfExtensions are the file name extensions containerd and CRI-O read from
// the CNI config directory.
var ConfExtensions = []string{".conf", ".conflist", ".json"}

// LoadConfFile loads a config file the way containerd's go-cni does: a
// .conflist as a list, anything else as one plugin config upgraded to a list.
func LoadConfFile(path string) (*libcni.NetworkConfigList, error) {
	if strings.HasSuffix(path, ".conflist") {
		return libcni.ConfListFromFile(path)
	}
	//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
	one, err := libcni.ConfFromFile(path)
	if err != nil {
		return nil, err
	}
	//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
	return libcni.ConfListFromConf(one)
}
