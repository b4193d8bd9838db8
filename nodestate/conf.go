package nodestate

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/conffile"
)

// ConfExtensions are the file name extensions containerd and CRI-O read from
// the CNI config directory.
var ConfExtensions = []string{".conf", ".conflist", ".json"}

// ReadConf reads a config file (of the conf dir, a drop-in, or one a person
// names) with the bound a plugin puts on its stdin: a regular file, or a
// symlink to one, of at most cniplug.MaxConfigBytes. A symlink to /dev/zero,
// a FIFO or a larger file is an error naming the file (errors.Is
// conffile.ErrTooLarge for the last), never a read without end or a wait.
func ReadConf(path string) ([]byte, error) {
	return conffile.ReadNamed(path, cniplug.MaxConfigBytes)
}

// DropIn is a plugin config of a conflist's drop-in directory.
type DropIn struct {
	Path string // the file
	Conf *libcni.PluginConfig
}

// DropIns reads the drop-in plugin configs of the list named name whose
// file is in dir: dir/name/*.conf in name order, as libcni 1.3's
// NetworkPluginConfsFromFiles, each read as ReadConf reads. No directory is
// no drop-ins.
func DropIns(dir, name string) ([]DropIn, error) {
	pdir := filepath.Join(dir, name)
	files, err := libcni.ConfFiles(pdir, []string{".conf"})
	if err != nil {
		return nil, fmt.Errorf("the plugins of %s: %w", pdir, err)
	}
	var out []DropIn
	for _, f := range files {
		b, err := ReadConf(f)
		if err != nil {
			return nil, err
		}
		p, err := libcni.NetworkPluginConfFromBytes(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, DropIn{Path: f, Conf: p})
	}
	return out, nil
}

// LoadConfFile loads a config file the way containerd's go-cni does: a
// .conflist as a list with the plugins of its drop-in directory (libcni's
// ConfListFromFile), anything else as one plugin config upgraded to a list.
// Every file is read as ReadConf reads.
func LoadConfFile(path string) (*libcni.NetworkConfigList, error) {
	b, err := ReadConf(path)
	if err != nil {
		return nil, err
	}
	if !strings.HasSuffix(path, ".conflist") {
		//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
		one, err := libcni.ConfFromBytes(b)
		if err != nil {
			return nil, err
		}
		//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
		return libcni.ConfListFromConf(one)
	}
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		return nil, err
	}
	if !list.LoadOnlyInlinedPlugins {
		dropIns, err := DropIns(filepath.Dir(path), list.Name)
		if err != nil {
			return nil, err
		}
		for _, d := range dropIns {
			list.Plugins = append(list.Plugins, d.Conf)
		}
	}
	if len(list.Plugins) == 0 {
		// As libcni: the caller decides whether that is a problem.
		return nil, errNoPlugins
	}
	return list, nil
}

// errNoPlugins is libcni's error for a list without plugins, inline or
// dropped in.
var errNoPlugins = errors.New("no plugin configs found")
