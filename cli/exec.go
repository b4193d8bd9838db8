package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/nodestate"
)

// execVerbs are the subcommands of `cnibox exec`: each runs a network config
// the way a runtime does, through libcni. Each verb takes only the flags it
// uses: the pod's (namespace, ifname, args) for add, check and del, --keep
// for gc.
func execVerbs(reg *cniplug.Registry) []*ucli.Command {
	network := []ucli.Flag{
		&ucli.StringFlag{Name: "net", Usage: "network `NAME` from --conf-dir"},
		&ucli.StringFlag{Name: "conf", Usage: "conflist or conf `FILE` (instead of --net)"},
		&ucli.StringFlag{Name: "conf-dir", Value: "/etc/cni/net.d", Usage: "where --net is looked up"},
		&ucli.StringFlag{Name: "bin-dir", Value: "/opt/cni/bin", EnvVars: []string{"CNI_PATH"}, Usage: "CNI plugin directories, separated by ':'"},
		&ucli.StringFlag{Name: "cache-dir", Value: "/var/lib/cni", Usage: "libcni's result cache"},
	}
	pod := append(slices.Clone(network),
		&ucli.StringFlag{Name: "netns", Usage: "pod network namespace `PATH`"},
		&ucli.StringFlag{Name: "new-netns", Usage: "create (add) or remove after (del) the namespace /run/netns/`NAME` (instead of --netns)"},
		&ucli.StringFlag{Name: "ifname", Value: "eth0", Usage: "interface name in the pod (CNI_IFNAME)"},
		&ucli.StringFlag{Name: "container-id", Usage: "CNI_CONTAINERID (default: derived from the netns path)"},
		&ucli.StringFlag{Name: "args", Usage: "CNI_ARGS as `K=V;K=V`"},
		&ucli.StringFlag{Name: "cap", Usage: "capability args as a JSON object, e.g. '{\"portMappings\":[...]}'"},
	)
	gc := append(slices.Clone(network),
		&ucli.StringSliceFlag{Name: "keep", Usage: "attachment `ID/IFNAME` to keep (default: those in libcni's cache)"})
	var subs []*ucli.Command
	for _, v := range []string{"add", "check", "del", "gc", "status"} {
		flags, usage := pod, " --net NAME|--conf FILE --netns PATH|--new-netns NAME [options]"
		switch v {
		case "gc":
			flags, usage = gc, " --net NAME|--conf FILE [--keep ID/IFNAME ...]"
		case "status":
			flags, usage = network, " --net NAME|--conf FILE"
		}
		subs = append(subs, &ucli.Command{
			Name:      v,
			Usage:     strings.ToUpper(v) + " through libcni, as a container runtime does",
			UsageText: "cnibox exec " + v + usage + "\n\n" + execNotes(v) + "Example: " + execExample(v),
			Flags:     flags,
			Action:    func(c *ucli.Context) error { return runExec(c, reg, v) },
		})
	}
	return subs
}

// execNotes is what --help says of a verb beyond its flags.
func execNotes(verb string) string {
	if verb != "add" {
		return ""
	}
	return "Every argument is checked before anything is made. When a plugin of the list fails, DEL runs\n" +
		"for the plugins that ran (in reverse order, the failed one included, as a runtime cleans up; one\n" +
		"DEL that fails does not stop the others') and a namespace made by --new-netns is removed. A namespace made under `ip netns exec` (or any\n" +
		"private mount namespace) lives only as long as that command: a warning says so.\n"
}

// execExample is the --help example of each verb. (A switch, not a map: a
// package-level map is built by code at every start of every role.)
func execExample(verb string) string {
	switch verb {
	case "add":
		return "cnibox exec add --net cnibox --new-netns test1 --args 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=test1'"
	case "check":
		return "cnibox exec check --net cnibox --netns /run/netns/test1"
	case "del":
		return "cnibox exec del --net cnibox --new-netns test1   (also removes the namespace)"
	case "gc":
		return "cnibox exec gc --net cnibox   (keeps the attachments in libcni's cache)"
	}
	return "cnibox exec status --net cnibox"
}

func loadNetwork(c *ucli.Context) (*libcni.NetworkConfigList, error) {
	if f := c.String("conf"); f != "" {
		if strings.HasSuffix(f, ".conflist") {
			return nodestate.LoadConfFile(f)
		}
		b, err := nodestate.ReadConf(f)
		if err != nil {
			return nil, err
		}
		if l, err := libcni.ConfListFromBytes(b); err == nil && len(l.Plugins) > 0 {
			return l, nil
		}
		//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
		one, err := libcni.ConfFromBytes(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		//lint:ignore SA1019 single-plugin .conf files are still read by containerd and CRI-O
		return libcni.ConfListFromConf(one)
	}
	if n := c.String("net"); n != "" {
		return libcni.LoadConfList(c.String("conf-dir"), n)
	}
	return nil, errors.New("name the network: --net NAME (from --conf-dir) or --conf FILE")
}

// addCounter is libcni's exec, counting the ADDs it ran: the plugins of a
// list that ran before one failed are the first adds of the list.
type addCounter struct {
	invoke.Exec
	adds int
}

func (e *addCounter) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	if slices.Contains(environ, "CNI_COMMAND=ADD") {
		e.adds++
	}
	return e.Exec.ExecPlugin(ctx, path, stdin, environ)
}

func runExec(c *ucli.Context, reg *cniplug.Registry, verb string) error {
	ctx := context.Background()
	if c.String("conf") == "" && c.String("net") == "" {
		return usageError(c, errors.New("name the network: --net NAME (from --conf-dir) or --conf FILE"), false)
	}
	list, err := loadNetwork(c)
	if err != nil {
		return err
	}
	exec := &addCounter{Exec: &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(c.String("bin-dir")), c.String("cache-dir"), exec)
	switch verb {
	case "status":
		if err := cni.GetStatusNetworkList(ctx, list); err != nil {
			return err
		}
		return execStatusCheck(c, reg, list)
	case "gc":
		return runGC(c, cni, list)
	}

	// Every argument is checked before anything is made.
	netnsPath, newNS := c.String("netns"), c.String("new-netns")
	switch {
	case netnsPath != "" && newNS != "":
		return fmt.Errorf("--netns %q and --new-netns %q: give one of them (--new-netns %s is the namespace /run/netns/%s)", netnsPath, newNS, newNS, newNS)
	case newNS != "":
		if strings.ContainsAny(newNS, "/\x00") || newNS == "." || newNS == ".." {
			return fmt.Errorf("--new-netns %q: want a name (the namespace is /run/netns/NAME); use --netns PATH for a path", newNS)
		}
		netnsPath = filepath.Join(netops.NamedNSDir, newNS)
	case netnsPath == "" && verb != "del":
		return errors.New("give the pod namespace: --netns PATH or --new-netns NAME")
	}
	rt, err := runtimeConf(c, netnsPath)
	if err != nil {
		return err
	}
	switch verb {
	case "add":
		return execAdd(c, cni, exec, list, rt, newNS)
	case "check":
		if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "%s %s on %q: ok\n", rt.ContainerID, rt.IfName, list.Name)
		return nil
	default: // del
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			return err
		}
		if newNS != "" {
			if err := netops.DeleteNamedNS(newNS); err != nil {
				return fmt.Errorf("remove namespace %s: %w", newNS, err)
			}
		}
		return nil
	}
}

// execStatusCheck follows the plugins' STATUS with cnibox check of the
// network's config: an error (ADD would fail on it) makes the network not
// ready, exit 1; warnings (fields no plugin reads, a typo) leave it ready
// but not clean, exit 0, each named.
func execStatusCheck(c *ucli.Context, reg *cniplug.Registry, list *libcni.NetworkConfigList) error {
	w := c.App.Writer
	label := c.String("conf")
	if label == "" {
		label = fmt.Sprintf("network %q in %s", list.Name, c.String("conf-dir"))
	}
	// list.Bytes is a conflist, also when it was made of a .conf file.
	dirs, err := binDirs(c)
	if err != nil {
		return err
	}
	ck := checker{reg: reg, binDirs: dirs}
	rep := checkReport{BinDirs: ck.binDirs, Files: []checkedFile{ck.fileData(label, "net.conflist", list.Bytes)}}
	rep.count()
	if rep.Errors+rep.Warnings > 0 {
		if err := printConfigCheck(w, rep); err != nil {
			return err
		}
	}
	// STATUS is CNI 1.1.0's: libcni sends none for an older cniVersion
	// and reports success, which says nothing of the plugins.
	if ok, _ := version.GreaterThanOrEqualTo(list.CNIVersion, "1.1.0"); !ok {
		if rep.Errors > 0 {
			return &exitError{code: 1, msg: fmt.Sprintf("network %q: cniVersion %s has no STATUS (CNI 1.1.0), none was sent; cnibox check found %d error(s) an ADD would fail on", list.Name, list.CNIVersion, rep.Errors)}
		}
		fmt.Fprintf(w, "network %q: cniVersion %s has no STATUS (CNI 1.1.0), none was sent: readiness unknown; cnibox check found %d warning(s)\n", list.Name, list.CNIVersion, rep.Warnings)
		return nil
	}
	switch {
	case rep.Errors > 0:
		return &exitError{code: 1, msg: fmt.Sprintf("network %q is not ready: its plugins answer STATUS, but cnibox check found %d error(s) an ADD would fail on", list.Name, rep.Errors)}
	case rep.Warnings > 0:
		fmt.Fprintf(w, "network %q is ready, not clean: %d warning(s) from cnibox check (see above)\n", list.Name, rep.Warnings)
	default:
		fmt.Fprintf(w, "network %q is ready\n", list.Name)
	}
	return nil
}

// execAdd runs ADD of list, first making the namespace newNS when given.
// When a plugin fails, it runs DEL for the plugins that ran (rollbackDel),
// as containerd and CRI-O run DEL after a failed ADD, then removes newNS.
func execAdd(c *ucli.Context, cni *libcni.CNIConfig, exec *addCounter, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf, newNS string) error {
	ctx := context.Background()
	if newNS != "" {
		if _, err := netops.CreateNamedNS(newNS); err != nil {
			return fmt.Errorf("create namespace %s: %w", newNS, err)
		}
		if err := netops.CheckNamedNSOutlivesCaller(newNS); errors.Is(err, netops.ErrNSNotShared) {
			fmt.Fprintf(c.App.ErrWriter, "cnibox: warning: %v: the namespace goes when this command's mount namespace does "+
				"(under `ip netns exec`, when that command exits) and later calls find no namespace; "+
				"run cnibox exec in the node's mount namespace (nsenter --net=/run/netns/NODE, not ip netns exec)\n", err)
		}
	}
	res, err := cni.AddNetworkList(ctx, list, rt)
	if err == nil {
		return res.PrintTo(c.App.Writer)
	}
	ran := list.Plugins[:min(exec.adds, len(list.Plugins))]
	if len(ran) > 0 {
		names, derr := rollbackDel(ctx, cni, list, ran, rt)
		if derr != nil {
			err = errors.Join(err, fmt.Errorf("DEL after the failed ADD (plugins %s): %w", strings.Join(names, ", "), derr))
		} else {
			fmt.Fprintf(c.App.ErrWriter, "cnibox: ADD failed; DEL ran for %s\n", strings.Join(names, ", "))
		}
	}
	if newNS != "" {
		if derr := netops.DeleteNamedNS(newNS); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove namespace %s: %w", newNS, derr))
		}
	}
	return err
}

// rollbackDel runs DEL of each plugin of ran (the first plugins of list),
// in reverse order, with no cached result, as libcni's DelNetworkList does;
// unlike it, one plugin's failing DEL does not stop the others' (the
// failed ADD's plugin often fails its DEL too: a cniVersion it does not
// speak), so every plugin that ran gives back what it made. names are the
// plugins in the order DEL ran; err joins the failures.
func rollbackDel(ctx context.Context, cni *libcni.CNIConfig, list *libcni.NetworkConfigList, ran []*libcni.PluginConfig, rt *libcni.RuntimeConf) (names []string, err error) {
	var errs []error
	for _, p := range slices.Backward(ran) {
		names = append(names, p.Network.Type)
		one := *list
		one.Plugins = []*libcni.PluginConfig{p}
		if derr := cni.DelNetworkList(ctx, &one, rt); derr != nil {
			errs = append(errs, derr)
		}
	}
	return names, errors.Join(errs...)
}

func runtimeConf(c *ucli.Context, netnsPath string) (*libcni.RuntimeConf, error) {
	id := c.String("container-id")
	if id == "" {
		sum := sha256.Sum256([]byte(netnsPath))
		id = "cnibox-" + hex.EncodeToString(sum[:8])
	}
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netnsPath, IfName: c.String("ifname")}
	if s := c.String("args"); s != "" {
		for _, kv := range strings.Split(s, ";") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, fmt.Errorf("--args %q: %q is not K=V; want K=V pairs separated by ';', e.g. 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0'", s, kv)
			}
			rt.Args = append(rt.Args, [2]string{k, v})
		}
	}
	if s := c.String("cap"); s != "" {
		if err := json.Unmarshal([]byte(s), &rt.CapabilityArgs); err != nil {
			return nil, fmt.Errorf("--cap %q: not a JSON object (%w); e.g. '{\"portMappings\":[{\"hostPort\":8080,\"containerPort\":80,\"protocol\":\"tcp\"}]}'", s, err)
		}
	}
	return rt, nil
}

func runGC(c *ucli.Context, cni *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
	var keep []types.GCAttachment
	if ks := c.StringSlice("keep"); len(ks) > 0 {
		for _, k := range ks {
			id, ifname, ok := strings.Cut(k, "/")
			if !ok {
				return fmt.Errorf("--keep %q: want CONTAINERID/IFNAME", k)
			}
			keep = append(keep, types.GCAttachment{ContainerID: id, IfName: ifname})
		}
	} else {
		cached, err := cni.GetCachedAttachments("")
		if err != nil {
			return fmt.Errorf("read libcni's cache: %w", err)
		}
		for _, a := range cached {
			if a.Network == list.Name {
				keep = append(keep, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
			}
		}
	}
	if err := cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{ValidAttachments: keep}); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "gc of %q done, %d attachment(s) kept\n", list.Name, len(keep))
	return nil
}
