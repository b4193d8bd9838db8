//go:build kube

package node

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The soak's namespaces: churned pods go to soakNS and, one in four, to
// soakPolicyNS, where a NetworkPolicy lets in only pods labelled
// access=allowed. wbNAD is the secondary network (a bridge of its own on
// each node, addresses from the whereabouts IPAM) a third of the pods
// name; a quarter have a hostPort (portmap).
const (
	soakNS       = "soak"
	soakPolicyNS = "soak-np"
	wbNAD        = "soak-wb"
	wbRange      = "10.98.0.0/16"
	soakPort     = 8080
	// targetRate is the churn's target: pod creates per second across the
	// nodes (and as many deletes once the pods' lifetimes end).
	targetRate = 5
	// maxLive caps the churned pods that exist at once.
	maxLive = 90
)

// podState is what the soak knows of one pod.
type podState struct {
	ns, name, node string
	deleteAt       time.Time // when the churn deletes it
	deleting       bool
	ip             string
	secondary      []string
	runningAt      time.Time // first seen Running with ip
	reachedAt      time.Time
	lastOK         time.Time // last answer to a probe
	flaggedNew     bool      // its reach-new breach is logged
	flaggedDown    bool      // its reach-after-fault breach is logged
	downKind       string    // the fault before the outage began
	rebootedAt     time.Time // its node's last reboot ended (new sandboxes)
	agentBackAt    time.Time // its node's agent was last started again after a kill
}

func (p *podState) key() string { return p.ns + "/" + p.name }

// wbNADFor is the whereabouts NAD in namespace ns.
func wbNADFor(ns string) string {
	conf := `{"cniVersion":"1.0.0","name":"` + wbNAD + `","type":"bridge","bridge":"br-soak","ipam":{"type":"whereabouts","range":"` + wbRange + `"}}`
	nad := map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": wbNAD, "namespace": ns}, "spec": map[string]any{"config": conf}}
	out, _ := json.Marshal(nad)
	return string(out)
}

// trustSoak makes the agent trust the soak's namespaces' NADs: the
// secondary network is a bridge of the node (br-soak), which the agent
// serves only to a namespace it trusts (docs/security.md). Without it a
// third of the churned pods never ran (every soak between issue 42's
// allowlist and this).
func trustSoak(t *testing.T, manifest string) string {
	const flag = "--nad-trusted-namespaces=kube-system,default"
	if !strings.Contains(manifest, flag) {
		t.Fatalf("the rendered manifest has no %s to add the soak's namespaces to", flag)
	}
	return strings.ReplaceAll(manifest, flag, flag+","+soakNS+","+soakPolicyNS)
}

// soakPolicy lets into soakPolicyNS's pods only its pods labelled
// access=allowed.
const soakPolicy = `{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"allowed-only","namespace":"` + soakPolicyNS + `"},
"spec":{"podSelector":{},"policyTypes":["Ingress"],"ingress":[{"from":[{"podSelector":{"matchLabels":{"access":"allowed"}}}]}]}}`

// setup wraps the pod network in multi (the NAD and whereabouts CRDs
// first), makes the namespaces, the NADs, the policy and the probers: on
// each node a pod in soakNS (a denied peer of soakPolicyNS) and one
// labelled access=allowed in soakPolicyNS.
func (s *soak) setup() {
	c, t := s.c, s.t
	applyNADCRD(t, c.node)
	applyCRDs(t, c.node, whereaboutsCRDFile, "ippools.whereabouts.cni.cncf.io",
		"overlappingrangeipreservations.whereabouts.cni.cncf.io", "nodeslicepools.whereabouts.cni.cncf.io")
	conf := strings.TrimSpace(c.must("-n", "kube-system", "get", "configmap", "cnibox", "-o", "jsonpath={.data.cni-conf\\.json}"))
	multi := multiConf(t, conf)
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{"cni-conf.json": multi}})
	c.must("-n", "kube-system", "patch", "configmap", "cnibox", "--type=merge", "-p", string(patch))
	c.must("-n", "kube-system", "rollout", "restart", "ds/cnibox")
	c.must("-n", "kube-system", "rollout", "status", "ds/cnibox", c.timeout())
	for _, n := range c.nodes {
		c.poll(n.name+"'s conflist is multi's", func() error {
			got, err := os.ReadFile(filepath.Join(n.hostDir("/etc/cni/net.d"), "10-cnibox.conflist"))
			if err != nil || !strings.Contains(string(got), `"multi"`) {
				return fmt.Errorf("%s: %v", got, err)
			}
			return nil
		})
	}
	c.apply(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + soakNS + `"}}`)
	c.apply(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"` + soakPolicyNS + `"}}`)
	for _, ns := range []string{soakNS, soakPolicyNS} {
		c.poll("the default ServiceAccount of "+ns, func() error {
			_, err := c.kubectl("-n", ns, "get", "serviceaccount", "default")
			return err
		})
		c.apply(wbNADFor(ns))
	}
	c.apply(soakPolicy)
	var names []string
	for _, n := range c.nodes {
		c.apply(s.podJSON(soakNS, "prober-"+n.name, n.name, map[string]string{"soak": "prober"}, nil, proberMarker(n.name, false), 0))
		c.apply(s.podJSON(soakPolicyNS, "allowed-"+n.name, n.name, map[string]string{"soak": "prober", "access": "allowed"}, nil, proberMarker(n.name, true), 0))
		names = append(names, soakNS+"/prober-"+n.name, soakPolicyNS+"/allowed-"+n.name)
	}
	for _, nn := range names {
		ns, name, _ := strings.Cut(nn, "/")
		c.must("-n", ns, "wait", "--for=condition=Ready", "pod/"+name, c.timeout())
	}
}

// proberMarker is the prober's shell command: it sleeps, and its command
// line names it, so the soak finds its network namespace.
func proberMarker(node string, allowed bool) []string {
	kind := "soak-prober-"
	if allowed {
		kind = "soak-allowed-"
	}
	return []string{"sh", "-c", "httpd -p " + strconv.Itoa(soakPort) + " -h /; sleep 2147483647; : " + kind + node}
}

// podJSON is a busybox pod on node: command cmd (default: httpd on
// soakPort), the networks annotation when networks is set, a hostPort when
// hostPort > 0.
func (s *soak) podJSON(ns, name, node string, labels, annotations map[string]string, cmd []string, hostPort int) string {
	if cmd == nil {
		cmd = []string{"httpd", "-f", "-p", strconv.Itoa(soakPort), "-h", "/"}
	}
	ctr := corev1.Container{Name: "c", Image: busyboxRef, ImagePullPolicy: corev1.PullNever, Command: cmd}
	if hostPort > 0 {
		ctr.Ports = []corev1.ContainerPort{{ContainerPort: soakPort, HostPort: int32(hostPort), Protocol: corev1.ProtocolTCP}}
	}
	p := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64(0)),
			AutomountServiceAccountToken:  new(false),
			Containers:                    []corev1.Container{ctr},
		},
	}
	out, _ := json.Marshal(p)
	return string(out)
}

// churn creates pods at targetRate (each second a batch, one kubectl
// apply) on random nodes, each living 10 to 30 s, and deletes those whose
// time is up (one kubectl delete per namespace), until end.
func (s *soak) churn(end time.Time) {
	rng := rand.New(rand.NewPCG(s.seed, 1))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Now().Before(end) {
		<-tick.C
		s.mu.Lock()
		live := 0
		var due = map[string][]string{}
		now := time.Now()
		for _, p := range s.pods {
			if p.deleting || p.deleteAt.IsZero() {
				continue
			}
			if now.After(p.deleteAt) {
				p.deleting = true
				due[p.ns] = append(due[p.ns], p.name)
				continue
			}
			live++
		}
		var batch []string
		var made []*podState
		for i := 0; i < targetRate && live+i < maxLive; i++ {
			s.seq++
			ns := soakNS
			if rng.IntN(4) == 0 {
				ns = soakPolicyNS
			}
			p := &podState{ns: ns, name: fmt.Sprintf("c-%d", s.seq), node: s.c.nodes[rng.IntN(len(s.c.nodes))].name,
				deleteAt: now.Add(10*time.Second + time.Duration(rng.IntN(20000))*time.Millisecond)}
			var ann map[string]string
			if rng.IntN(3) == 0 {
				ann = map[string]string{"k8s.v1.cni.cncf.io/networks": wbNAD}
			}
			hostPort := 0
			if rng.IntN(4) == 0 {
				hostPort = 20000 + s.seq%10000
			}
			labels := map[string]string{"soak": "churn"}
			batch = append(batch, s.podJSON(ns, p.name, p.node, labels, ann, nil, hostPort))
			made = append(made, p)
		}
		s.mu.Unlock()
		for ns, names := range due {
			if _, err := s.c.kubectl(append([]string{"-n", ns, "delete", "pod", "--wait=false", "--ignore-not-found"}, names...)...); err != nil {
				s.logf("churn: delete %v: %v", names, err)
				continue
			}
			s.mu.Lock()
			s.deleted += len(names)
			s.mu.Unlock()
		}
		if len(batch) == 0 {
			continue
		}
		if _, err := s.c.kubectlIn(`{"apiVersion":"v1","kind":"List","items":[`+strings.Join(batch, ",")+`]}`, "create", "-f", "-"); err != nil {
			s.logf("churn: create %d pods: %v", len(batch), err)
		}
		s.mu.Lock()
		for _, p := range made {
			if _, ok := s.pods[p.key()]; !ok {
				s.pods[p.key()] = p
			}
			s.created++
		}
		s.mu.Unlock()
	}
}

// observe lists the pods every second: it records each pod's address
// once it runs, and checks that no address (primary or secondary) is held
// by two live pods.
func (s *soak) observe(stop <-chan struct{}) {
	reported := map[string]bool{}
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
		out, err := s.c.kubectl("get", "pods", "-A", "-o", "json")
		if err != nil {
			continue // the API server may be stopped: a fault
		}
		var list corev1.PodList
		if json.Unmarshal([]byte(out), &list) != nil {
			continue
		}
		holders := map[string][]string{}
		seen := map[string]bool{}
		now := time.Now()
		s.mu.Lock()
		for _, item := range list.Items {
			if item.Spec.HostNetwork {
				continue
			}
			key := item.Namespace + "/" + item.Name
			live := item.DeletionTimestamp == nil && item.Status.Phase == corev1.PodRunning
			var sec []string
			for _, st := range networkStatus(item) {
				if !st.Default {
					sec = append(sec, st.IPs...)
				}
			}
			if live && item.Status.PodIP != "" {
				holders[item.Status.PodIP] = append(holders[item.Status.PodIP], key)
				for _, ip := range sec {
					holders[ip] = append(holders[ip], key+" (secondary)")
				}
			}
			if node, ok := strings.CutPrefix(item.Name, "allowed-"); ok && item.Namespace == soakPolicyNS && live && item.Status.PodIP != "" &&
				s.allowedIP[node] != item.Status.PodIP {
				// the allowed prober's address as the other nodes' agents
				// learn it (settled)
				s.allowedIP[node], s.allowedAt[node] = item.Status.PodIP, now
			}
			if item.Namespace != soakNS && item.Namespace != soakPolicyNS || item.Labels["soak"] != "churn" {
				continue
			}
			seen[key] = true
			p := s.pods[key]
			if p == nil {
				p = &podState{ns: item.Namespace, name: item.Name}
				s.pods[key] = p
			}
			p.node = item.Spec.NodeName
			if item.DeletionTimestamp != nil {
				p.deleting = true
			}
			if !live || !podReady(item) || item.Status.PodIP == "" {
				continue
			}
			if p.ip != item.Status.PodIP {
				if p.ip == "" {
					s.running++
				}
				p.ip, p.runningAt, p.reachedAt, p.lastOK, p.flaggedNew, p.flaggedDown = item.Status.PodIP, now, time.Time{}, time.Time{}, false, false
			}
			if len(p.secondary) == 0 && len(sec) > 0 {
				s.runningSecondary++
			}
			p.secondary = sec
		}
		for key, p := range s.pods {
			if seen[key] {
				continue
			}
			// gone from the list: deleted (an object seen before, or one
			// whose creation is long past); a pod just created may not be
			// listed yet
			if p.ip != "" || now.Sub(p.deleteAt) > time.Minute {
				p.deleting = true
				delete(s.pods, key)
			}
		}
		s.mu.Unlock()
		for ip, keys := range holders {
			if len(keys) > 1 && !reported[ip+strings.Join(keys, ",")] {
				reported[ip+strings.Join(keys, ",")] = true
				s.breach("duplicate-address", "%s held by %s", ip, strings.Join(keys, " and "))
			}
		}
	}
}

// podReady reports whether the pod's Ready condition is true.
func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// networkStatus is the pod's network-status annotation (multi writes it).
func networkStatus(p corev1.Pod) []netStatus {
	var st []netStatus
	if raw := p.Annotations["k8s.v1.cni.cncf.io/network-status"]; raw != "" {
		json.Unmarshal([]byte(raw), &st)
	}
	return st
}

// quiesce deletes every churned pod, waits until they are gone, then
// leaves the cluster alone for a minute.
func (s *soak) quiesce() {
	for _, ns := range []string{soakNS, soakPolicyNS} {
		s.c.must("-n", ns, "delete", "pod", "-l", "soak=churn", "--wait=true", s.c.timeout())
	}
	s.logf("churn stopped: every churned pod deleted; a quiet minute")
	time.Sleep(time.Minute)
}
