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
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/netops"
)

// execVerbs are the subcommands of `cnibox exec`: each runs a network config
// the way a runtime does, through libcni.
func execVerbs() []*ucli.Command {
	flags := []ucli.Flag{
		&ucli.StringFlag{Name: "net", Usage: "network `NAME` from --conf-dir"},
		&ucli.StringFlag{Name: "conf", Usage: "conflist or conf `FILE` (instead of --net)"},
		&ucli.StringFlag{Name: "conf-dir", Value: "/etc/cni/net.d", Usage: "where --net is looked up"},
		&ucli.StringFlag{Name: "bin-dir", Value: "/opt/cni/bin", Usage: "CNI plugin directory (CNI_PATH)"},
		&ucli.StringFlag{Name: "cache-dir", Value: "/var/lib/cni", Usage: "libcni's result cache"},
		&ucli.StringFlag{Name: "netns", Usage: "pod network namespace `PATH`"},
		&ucli.StringFlag{Name: "new-netns", Usage: "create (add) or remove after (del) the namespace /run/netns/`NAME`"},
		&ucli.StringFlag{Name: "ifname", Value: "eth0", Usage: "interface name in the pod (CNI_IFNAME)"},
		&ucli.StringFlag{Name: "container-id", Usage: "CNI_CONTAINERID (default: derived from the netns path)"},
		&ucli.StringFlag{Name: "args", Usage: "CNI_ARGS as `K=V;K=V`"},
		&ucli.StringFlag{Name: "cap", Usage: "capability args as a JSON object, e.g. '{\"portMappings\":[...]}'"},
		&ucli.StringSliceFlag{Name: "keep", Usage: "gc: attachment `ID/IFNAME` to keep (default: those in libcni's cache)"},
	}
	verbs := []string{"add", "check", "del", "gc", "status"}
	var subs []*ucli.Command
	for _, v := range verbs {
		subs = append(subs, &ucli.Command{
			Name:  v,
			Usage: strings.ToUpper(v) + " through libcni, as a container runtime does",
			UsageText: "cnibox exec " + v + " --net NAME|--conf FILE [options]\n\n" +
				"Example: " + execExample(v),
			Flags:  flags,
			Action: func(c *ucli.Context) error { return runExec(c, v) },
		})
	}
	return subs
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
			return libcni.ConfListFromFile(f)
		}
		b, err := os.ReadFile(f)
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

func runExec(c *ucli.Context, verb string) error {
	ctx := context.Background()
	list, err := loadNetwork(c)
	if err != nil {
		return err
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(c.String("bin-dir")), c.String("cache-dir"), nil)
	switch verb {
	case "status":
		if err := cni.GetStatusNetworkList(ctx, list); err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "network %q is ready\n", list.Name)
		return nil
	case "gc":
		return runGC(c, cni, list)
	}

	netnsPath := c.String("netns")
	if name := c.String("new-netns"); name != "" {
		netnsPath = filepath.Join("/run/netns", name)
		if verb == "add" {
			if _, err := netops.CreateNamedNS(name); err != nil {
				return fmt.Errorf("create namespace %s: %w", name, err)
			}
		}
	}
	if netnsPath == "" && verb != "del" {
		return errors.New("give the pod namespace: --netns PATH or --new-netns NAME")
	}
	rt, err := runtimeConf(c, netnsPath)
	if err != nil {
		return err
	}
	switch verb {
	case "add":
		res, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			if c.String("new-netns") != "" {
				_ = netops.DeleteNamedNS(c.String("new-netns"))
			}
			return err
		}
		return res.PrintTo(c.App.Writer)
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
		if name := c.String("new-netns"); name != "" {
			if err := netops.DeleteNamedNS(name); err != nil {
				return fmt.Errorf("remove namespace %s: %w", name, err)
			}
		}
		return nil
	}
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
			if !ok {
				return nil, fmt.Errorf("--args %q: want K=V pairs separated by ';'", s)
			}
			rt.Args = append(rt.Args, [2]string{k, v})
		}
	}
	if s := c.String("cap"); s != "" {
		if err := json.Unmarshal([]byte(s), &rt.CapabilityArgs); err != nil {
			return nil, fmt.Errorf("--cap: not a JSON object: %w", err)
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
