package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/store"
)

func inspectCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "inspect",
		Usage: "show what cnibox recorded on this node",
		Subcommands: []*ucli.Command{
			{
				Name:  "endpoints",
				Usage: "every attachment on the node, with what the store recorded",
				Flags: []ucli.Flag{
					&ucli.StringFlag{Name: "network", Usage: "only this network"},
					&ucli.StringFlag{Name: "pod", Usage: "only this pod, as `NAMESPACE/NAME`"},
					&ucli.StringFlag{Name: "data-dir", Usage: "store directory (default $CNIBOX_DATA_DIR or /var/lib/cnibox)"},
					&ucli.BoolFlag{Name: "json", Usage: "print JSON"},
				},
				Action: inspectEndpoints,
			},
		},
	}
}

func inspectEndpoints(c *ucli.Context) error {
	st, err := store.Open(store.Dir(c.String("data-dir")))
	if err != nil {
		return err
	}
	eps, err := st.Endpoints(c.String("network"))
	st.Close()
	if err != nil {
		return err
	}
	if pod := c.String("pod"); pod != "" {
		var keep []store.Endpoint
		for _, ep := range eps {
			if ep.PodNamespace+"/"+ep.PodName == pod {
				keep = append(keep, ep)
			}
		}
		eps = keep
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		if eps == nil {
			eps = []store.Endpoint{}
		}
		return enc.Encode(eps)
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NETWORK\tCONTAINER\tIFNAME\tPOD\tIPS\tHOST VETH\tMAC\tNETNS\tCREATED")
	for _, ep := range eps {
		var ips []string
		for _, p := range ep.IPs {
			ips = append(ips, p.String())
		}
		pod := "-"
		if ep.PodName != "" {
			pod = ep.PodNamespace + "/" + ep.PodName
		}
		id := ep.ContainerID
		if len(id) > 12 {
			id = id[:12]
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ep.Network, id, ep.IfName, pod,
			strings.Join(ips, ","), ep.HostVeth, ep.MAC, ep.Netns, ep.Created.Format("2006-01-02 15:04:05"))
	}
	return w.Flush()
}
