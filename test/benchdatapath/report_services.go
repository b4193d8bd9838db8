package main

import (
	"fmt"
	"math"
	"strings"
)

// serviceMetrics are the measures of a row through a Service.
var serviceMetrics = []metric{metrics[2], metrics[3], metrics[4], metrics[5]}

// crrMetric is the measure issue 63's goal is on: connection rate.
var crrMetric = metrics[5]

// serviceComparisons are what cnibox's proxy is compared with: kube-proxy
// on cnibox's own overlay (only the proxy differs) and kube-proxy beside
// flanneld + the reference plugins (what an operator runs), same backend.
var serviceComparisons = []struct {
	title   string
	against func(backend string) string
}{
	{"kube-proxy on cnibox's overlay", func(b string) string { return "cnibox-" + b + "-kube-proxy" }},
	{"flanneld + reference plugins + kube-proxy", func(b string) string { return "flannel-" + b + "-kube-proxy" }},
}

// printServices prints the rows through a Service, then cnibox's proxy
// against kube-proxy row by row: the ratio of each measure (above 1:
// cnibox ahead; latency kube-proxy's over cnibox's), bold where cnibox is
// behind, and the goal of issue 63 (connection rate >= kube-proxy's on
// every row) on TCP_CRR.
func (r *report) printServices() {
	n := 0
	r.allRows(func(c config, pk string) {
		if throughService(pk) {
			n++
		}
	})
	if n == 0 {
		return
	}
	head, sep := "| path | pods, through |", "| --- | --- |"
	for _, m := range serviceMetrics {
		head += " " + m.name + " |"
		sep += " --- |"
	}
	fmt.Println("\nThrough a Service (ClusterIP from pod a; NodePort from a client off the cluster to node 0's address; same-node: the endpoint on the client's node, or the NodePort's; cross-node: on the other, across the overlay):")
	fmt.Println()
	fmt.Println(head)
	fmt.Println(sep)
	r.allRows(func(c config, pk string) {
		if !throughService(pk) {
			return
		}
		line := fmt.Sprintf("| %s | %s |", c.title, pk)
		for _, m := range serviceMetrics {
			v, _ := r.value(c.name, pk, m)
			line += " " + fmt.Sprintf(m.format, v*m.scale) + " |"
		}
		fmt.Println(line)
	})

	var lines, misses []string
	r.allRows(func(c config, pk string) {
		if !throughService(pk) || c.proxy != cniboxProxy {
			return
		}
		for _, cmp := range serviceComparisons {
			other := cmp.against(c.backend)
			if r.samples[other][pk] == nil {
				continue
			}
			line := fmt.Sprintf("| %s | %s | %s |", c.backend, pk, cmp.title)
			for _, m := range serviceMetrics {
				v, ok1 := r.value(c.name, pk, m)
				b, ok2 := r.value(other, pk, m)
				if !ok1 || !ok2 {
					line += " |"
					continue
				}
				q := ratio(v, b, m.higher)
				cell := fmt.Sprintf(m.format+" / "+m.format+" (%.2f)", v*m.scale, b*m.scale, q)
				if math.Round(q*100)/100 < 1 { // as printed
					cell = "**" + cell + "**"
					if m.name == crrMetric.name {
						misses = append(misses, fmt.Sprintf("%s %s against %s (%.2f)", c.backend, pk, cmp.title, q))
					}
				}
				line += " " + cell + " |"
			}
			lines = append(lines, line)
		}
	})
	if len(lines) == 0 {
		return
	}
	fmt.Println("\ncnibox's Services proxy / kube-proxy v1.34.2 (nftables), same backend, medians; in brackets the ratio, above 1: cnibox ahead (latency: kube-proxy's over cnibox's); bold: cnibox behind:")
	fmt.Println()
	head, sep = "| backend | pods, through | against |", "| --- | --- | --- |"
	for _, m := range serviceMetrics {
		head += " " + m.name + " |"
		sep += " --- |"
	}
	fmt.Println(head)
	fmt.Println(sep)
	for _, l := range lines {
		fmt.Println(l)
	}
	if len(misses) == 0 {
		fmt.Println("\nIssue 63's goal (connection rate >= kube-proxy's on every row): met on every row measured.")
	} else {
		fmt.Printf("\nIssue 63's goal (connection rate >= kube-proxy's on every row): missed on %s.\n", strings.Join(misses, "; "))
	}
}
