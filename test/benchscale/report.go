package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// row is one backend, agent and N.
type row struct {
	Backend      string  `json:"backend"`
	Type         string  `json:"type"` // the overlay backend: vxlan, host-gw, wireguard
	Agent        string  `json:"agent"`
	Nodes        int     `json:"nodes"`
	Peers        string  `json:"peers,omitempty"` // kube: who published the simulated nodes
	ConvergeS    float64 `json:"converge_s"`      // agent start -> the kernel holds every peer's route
	ConvergeCPUS float64 `json:"converge_cpu_s"`  // the agent's CPU from its start to convergence (read just after)
	Mismatches   int     `json:"mismatches"`      // peers wrong or extra entries after convergence
	RSSMiB       float64 `json:"rss_mib"`         // resident set after convergence (and the updates)
	PeakMiB      float64 `json:"peak_mib"`        // VmHWM
	AnonMiB      float64 `json:"anon_mib"`        // RssAnon: the part that is not the binary's pages
	RemovalMS    float64 `json:"removal_ms"`      // peer deleted -> its route gone
	UpdBytes     float64 `json:"update_bytes"`    // bytes the agent read per unrelated status update (kube)
	UpdCPUms     float64 `json:"update_cpu_ms"`
	// What one status update of a Node would cost over other watches
	// (payload bytes per event, kube).
	WatchJSON      float64 `json:"watch_json_bytes,omitempty"`
	WatchProto     float64 `json:"watch_proto_bytes,omitempty"`
	WatchMetaJSON  float64 `json:"watch_meta_json_bytes,omitempty"`
	WatchMetaProto float64 `json:"watch_meta_proto_bytes,omitempty"`
	ManagedFields  int     `json:"managed_fields_bytes,omitempty"` // of one simulated Node, JSON
	Load           string  `json:"load"`                           // /proc/loadavg at the end
	// With -pods (kube): the pods and policies in the API, whether the agent
	// enforced them, when its policy table's first sync ended (from its
	// start), and the bytes and CPU per pod label change of a churn.
	Pods        int     `json:"pods,omitempty"`
	Policies    int     `json:"policies,omitempty"`
	Policy      bool    `json:"network_policy,omitempty"`
	PolicySyncS float64 `json:"policy_sync_s,omitempty"`
	ChurnBytes  float64 `json:"churn_bytes,omitempty"`
	ChurnCPUms  float64 `json:"churn_cpu_ms,omitempty"`
}

func (r row) print() {
	be := r.Backend + " " + r.Type
	if r.Peers != "" {
		be += "/" + r.Peers + " peers"
	}
	fmt.Printf("%-22s %-17s N=%-5d converge %6.2f s (CPU %4.2f s)  mismatches %d  RSS %5.1f MiB (anon %4.1f)  peak %5.1f MiB  removal %6.1f ms",
		be, r.Agent, r.Nodes, r.ConvergeS, r.ConvergeCPUS, r.Mismatches, r.RSSMiB, r.AnonMiB, r.PeakMiB, r.RemovalMS)
	if r.Backend == "kube" {
		fmt.Printf("  per unrelated status update %5.0f B read, %.2f ms CPU", r.UpdBytes, r.UpdCPUms)
	}
	if r.Pods > 0 {
		fmt.Printf("  %d pods, %d policies, network-policy %t", r.Pods, r.Policies, r.Policy)
		if r.Policy {
			fmt.Printf(" (table synced %.2f s after the start)", r.PolicySyncS)
		}
		fmt.Printf(", per pod label change %.0f B read, %.2f ms CPU", r.ChurnBytes, r.ChurnCPUms)
	}
	fmt.Printf("  (load %s)\n", r.Load)
	if r.WatchJSON > 0 {
		fmt.Printf("     one status update over a watch of: full Node JSON %.0f B, protobuf %.0f B; metadata only JSON %.0f B, protobuf %.0f B (managedFields %d B)\n",
			r.WatchJSON, r.WatchProto, r.WatchMetaJSON, r.WatchMetaProto, r.ManagedFields)
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func writeJSON(o *options, rows []row) error {
	var lines []string
	for _, r := range rows {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		lines = append(lines, string(b))
	}
	out := strings.Join(lines, "\n") + "\n"
	if o.json == "" {
		fmt.Print(out)
		return nil
	}
	return os.WriteFile(o.json, []byte(out), 0o644)
}
