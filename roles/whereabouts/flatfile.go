package whereabouts

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/conffile"
	"github.com/cnibox/cnibox/roles/internal/ipamrole"
)

// flatFiles are where whereabouts looks for its flat file after
// configuration_path, in this order (pkg/config.GetFlatIPAM).
var flatFiles = []string{
	"/etc/kubernetes/cni/net.d/whereabouts.d/whereabouts.conf",
	"/etc/cni/net.d/whereabouts.d/whereabouts.conf",
	"/host/etc/cni/net.d/whereabouts.d/whereabouts.conf",
}

// mergeFlatFile fills the fields the "ipam" section leaves empty from the
// first flat file found, as whereabouts merges it (its kubeconfig and the
// like are read and have no effect here; enable_overlapping_ranges is the
// section's own, as in whereabouts). No file is fine.
func mergeFlatFile(in *ipamJSON) error {
	paths := flatFiles
	if in.ConfigurationPath != "" {
		p := in.ConfigurationPath
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			p = filepath.Join(p, "whereabouts.conf")
		}
		paths = append([]string{p}, paths...)
	}
	for _, p := range paths {
		b, err := conffile.Read(p, ipamrole.MaxFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return cniplug.ConfError("ipam.configuration_path", "whereabouts' flat file %s: %v: fix or remove it", p, err)
		}
		var flat ipamJSON
		if err := ipamrole.Decode("whereabouts flat file "+p, b, &flat); err != nil {
			return err
		}
		fill(in, &flat)
		return nil
	}
	return nil
}

// fill copies into in each field of flat that in leaves empty.
func fill(in, flat *ipamJSON) {
	in.Range = cmp.Or(in.Range, flat.Range)
	in.RangeStart = cmp.Or(in.RangeStart, flat.RangeStart)
	in.RangeEnd = cmp.Or(in.RangeEnd, flat.RangeEnd)
	in.NetworkName = cmp.Or(in.NetworkName, flat.NetworkName)
	in.NodeSliceSize = cmp.Or(in.NodeSliceSize, flat.NodeSliceSize)
	in.Gateway = cmp.Or(in.Gateway, flat.Gateway)
	in.LogFile = cmp.Or(in.LogFile, flat.LogFile)
	in.LogLevel = cmp.Or(in.LogLevel, flat.LogLevel)
	in.AgentSocket = cmp.Or(in.AgentSocket, flat.AgentSocket)
	in.DataDir = cmp.Or(in.DataDir, flat.DataDir)
	if in.Exclude == nil {
		in.Exclude = flat.Exclude
	}
	if in.IPRanges == nil {
		in.IPRanges = flat.IPRanges
	}
	if in.Routes == nil {
		in.Routes = flat.Routes
	}
	if in.Addresses == nil {
		in.Addresses = flat.Addresses
	}
	if in.DNS.IsEmpty() {
		in.DNS = flat.DNS
	}
	if in.Sticky == nil {
		in.Sticky = flat.Sticky
	}
}
