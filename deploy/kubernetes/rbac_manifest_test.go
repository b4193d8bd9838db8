package kubernetes

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// rbacObjects are a manifest's RBAC and admission policy objects, by name.
type rbacObjects struct {
	clusterRoles    map[string]*rbacv1.ClusterRole
	clusterBindings map[string]*rbacv1.ClusterRoleBinding
	roles           map[string]*rbacv1.Role
	roleBindings    map[string]*rbacv1.RoleBinding
	policies        map[string]*admv1.ValidatingAdmissionPolicy
	policyBindings  map[string]*admv1.ValidatingAdmissionPolicyBinding
}

// decode returns where a document of kind goes (named, once decoded, by
// add), or nil for another kind.
func (r *rbacObjects) decode(kind string) any {
	switch kind {
	case "ClusterRole":
		return &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}
	case "Role":
		return &rbacv1.Role{}
	case "RoleBinding":
		return &rbacv1.RoleBinding{}
	case "ValidatingAdmissionPolicy":
		return &admv1.ValidatingAdmissionPolicy{}
	case "ValidatingAdmissionPolicyBinding":
		return &admv1.ValidatingAdmissionPolicyBinding{}
	}
	return nil
}

// add files a decoded object under its name.
func (r *rbacObjects) add(o any) {
	if r.clusterRoles == nil {
		r.clusterRoles, r.clusterBindings = map[string]*rbacv1.ClusterRole{}, map[string]*rbacv1.ClusterRoleBinding{}
		r.roles, r.roleBindings = map[string]*rbacv1.Role{}, map[string]*rbacv1.RoleBinding{}
		r.policies, r.policyBindings = map[string]*admv1.ValidatingAdmissionPolicy{}, map[string]*admv1.ValidatingAdmissionPolicyBinding{}
	}
	switch o := o.(type) {
	case *rbacv1.ClusterRole:
		r.clusterRoles[o.Name] = o
	case *rbacv1.ClusterRoleBinding:
		r.clusterBindings[o.Name] = o
	case *rbacv1.Role:
		r.roles[o.Name] = o
	case *rbacv1.RoleBinding:
		r.roleBindings[o.Name] = o
	case *admv1.ValidatingAdmissionPolicy:
		r.policies[o.Name] = o
	case *admv1.ValidatingAdmissionPolicyBinding:
		r.policyBindings[o.Name] = o
	}
}

// loadRBAC decodes the RBAC and policy objects of a manifest file strictly.
func loadRBAC(t *testing.T, file string) rbacObjects {
	t.Helper()
	var r rbacObjects
	var decoded []any
	eachDoc(t, file, func(kind, doc string) any {
		o := r.decode(kind)
		if o != nil {
			decoded = append(decoded, o)
		}
		return o
	})
	for _, o := range decoded {
		r.add(o)
	}
	return r
}

// A rule of each feature's role: the calls the agent makes (docs/security.md
// lists them with the code that makes each).
var (
	// the overlay (--kube-subnet-mgr): agent/lease/kubelease
	overlayRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	}
	// the pod API (--pod-api, --pod-api-only): agent/podapi/kube.go
	podAPIRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"network-attachment-definitions"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}
	// NetworkPolicy (--network-policy, on with --kube-subnet-mgr unless
	// =false): agent/policy's watcher and its Warning Events
	policyRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
		// the flow log's staged policies, when their CRDs are installed
		{APIGroups: []string{"cnibox.io"}, Resources: []string{"stagednetworkpolicies", "stagedclusternetworkpolicies"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}
	// ClusterNetworkPolicies (--cluster-network-policies, off by default)
	clusterPolicyRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"policy.networking.k8s.io"}, Resources: []string{"clusternetworkpolicies"}, Verbs: []string{"list", "watch"}},
		// domainNames' trusted resolvers: the cluster DNS Service and its
		// endpoints (agent/policy/resolvers.go)
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}
	// the Services proxy (--service-proxy, off by default): the Services
	// EndpointSlices and ServiceCIDRs of agent/cluster's cache (agent/services)
	serviceProxyRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: []string{"list", "watch"}},
	}
	// the LoadBalancer IPAM (--lb-ipam, off by default; agent/lbipam):
	// its informers of the Services and pools while it leads (the nodes:
	// the cache's), the Services' networks, the status writes and the
	// Warning Events ...
	lbIPAMClusterRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "nodes"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"cnibox.io"}, Resources: []string{"loadbalancerippools"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"cnibox.io"}, Resources: []string{"loadbalancerippools/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"servicecidrs"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}
	// ... and its Lease (agent/lbipam/lease.go), in the agent's namespace
	lbIPAMRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"cnibox-lb-ipam"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
	}
	// LoadBalancer announcements (--lb-announce, off by default;
	// agent/lbannounce): the pools, the Services' addresses and their
	// EndpointSlices (the nodes: the overlay's); its Leases are the egress
	// Role's, in cnibox-egress
	lbAnnounceClusterRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"cnibox.io"}, Resources: []string{"loadbalancerippools"}, Verbs: []string{"list", "watch"}},
	}
	// egress gateways (agent/egress: its informers and status write) ...
	egressClusterRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"cnibox.io"}, Resources: []string{"egressgateways"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"cnibox.io"}, Resources: []string{"egressgateways/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"list", "watch"}},
	}
	// ... and the Leases of the addresses (agent/egress/lease.go)
	egressRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"list", "watch", "create", "update"}},
	}
	// the cluster IPAM (--cluster-ipam): the reclaim reads the pods from
	// the informer cache (agent/clusteripam/reclaimpods.go, agent/cluster:
	// a list and a watch) ...
	clusterIPAMClusterRules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
	}
	// ... and, in the pools' namespace, the pools (agent/clusteripam/kube.go)
	// and the reclaim's Lease
	clusterIPAMRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"whereabouts.cni.cncf.io"}, Resources: []string{"ippools"}, Verbs: []string{"get", "list", "watch", "create", "update"}},
		{APIGroups: []string{"whereabouts.cni.cncf.io"}, Resources: []string{"overlappingrangeipreservations"}, Verbs: []string{"get", "list", "create", "delete"}},
		{APIGroups: []string{"whereabouts.cni.cncf.io"}, Resources: []string{"nodeslicepools"}, Verbs: []string{"get", "list", "create", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"cnibox-whereabouts-reclaim"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
	}
)

// checkRBAC: the manifest's roles are the features' rules exactly, each
// bound to the service account sa (kube-system) if and only if the agent's
// command turns its feature on; the admission policy that narrows the pod
// patches applies to sa and is bound.
func checkRBAC(t *testing.T, file, sa string, agentCmd []string) {
	r := loadRBAC(t, file)
	has := func(flags ...string) bool {
		return slices.ContainsFunc(agentCmd, func(a string) bool { return slices.Contains(flags, a) })
	}
	type feature struct {
		name        string
		on          bool
		cluster, ns []rbacv1.PolicyRule
		nsName      string // the Role's namespace ("": kube-system)
	}
	features := []feature{
		{"", has("--kube-subnet-mgr"), overlayRules, nil, ""},
		{"-pod-api", has("--pod-api", "--pod-api-only"), podAPIRules, nil, ""},
		{"-cluster-ipam", has("--cluster-ipam"), clusterIPAMClusterRules, clusterIPAMRules, ""},
		{"-policy", has("--kube-subnet-mgr") && !has("--network-policy=false"), policyRules, nil, ""},
		{"-cluster-network-policies", has("--cluster-network-policies"), clusterPolicyRules, nil, ""},
		{"-service-proxy", has("--service-proxy"), serviceProxyRules, nil, ""},
		{"-lb-ipam", has("--lb-ipam"), lbIPAMClusterRules, lbIPAMRules, ""},
		{"-lb-announce", has("--lb-announce"), lbAnnounceClusterRules, nil, ""},
		{"-egress", has("--kube-subnet-mgr"), egressClusterRules, egressRules, "cnibox-egress"},
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "kube-system"}}
	seen := map[string]bool{}
	for _, f := range features {
		name := sa + f.name
		cr, ok := r.clusterRoles[name]
		if ok {
			seen["ClusterRole "+name] = true
		}
		crb, bound := r.clusterBindings[name]
		if bound {
			seen["ClusterRoleBinding "+name] = true
		}
		if !f.on {
			if ok || bound {
				t.Errorf("%s: the feature of ClusterRole %s is off in the agent's command %v, yet the role or its binding is there", file, name, agentCmd)
			}
			continue
		}
		if !ok || !bound {
			t.Errorf("%s: the agent's command %v turns on the feature of ClusterRole %s: the role or its binding is missing", file, agentCmd, name)
			continue
		}
		if !reflect.DeepEqual(cr.Rules, f.cluster) {
			t.Errorf("%s: ClusterRole %s rules\n%+v\nwant\n%+v", file, name, cr.Rules, f.cluster)
		}
		if crb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name}) || !reflect.DeepEqual(crb.Subjects, subject) {
			t.Errorf("%s: ClusterRoleBinding %s: %+v %+v, want %s bound to %v", file, name, crb.RoleRef, crb.Subjects, name, subject)
		}
		if f.ns == nil {
			continue
		}
		role, rb := r.roles[name], r.roleBindings[name]
		if role == nil || rb == nil {
			t.Errorf("%s: no Role and RoleBinding %s", file, name)
			continue
		}
		seen["Role "+name], seen["RoleBinding "+name] = true, true
		if wantNS := cmp.Or(f.nsName, "kube-system"); role.Namespace != wantNS || rb.Namespace != wantNS {
			t.Errorf("%s: Role %s in %q, its binding in %q: want %s", file, name, role.Namespace, rb.Namespace, wantNS)
		}
		if !reflect.DeepEqual(role.Rules, f.ns) {
			t.Errorf("%s: Role %s rules\n%+v\nwant\n%+v", file, name, role.Rules, f.ns)
		}
		if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}) || !reflect.DeepEqual(rb.Subjects, subject) {
			t.Errorf("%s: RoleBinding %s: %+v %+v", file, name, rb.RoleRef, rb.Subjects)
		}
	}
	for kind, n := range map[string]int{"ClusterRole": len(r.clusterRoles), "ClusterRoleBinding": len(r.clusterBindings), "Role": len(r.roles), "RoleBinding": len(r.roleBindings)} {
		count := 0
		for s := range seen {
			if strings.HasPrefix(s, kind+" ") {
				count++
			}
		}
		if n != count {
			t.Errorf("%s: %d %ss, %d of them a feature's: no other is wanted", file, n, kind, count)
		}
	}

	// The policy: the agent's pod writes and Lease creations, bound.
	pol, pb := r.policies[sa], r.policyBindings[sa]
	if pol == nil || pb == nil {
		t.Fatalf("%s: no ValidatingAdmissionPolicy and binding %s", file, sa)
	}
	if pb.Spec.PolicyName != sa || !slices.Equal(pb.Spec.ValidationActions, []admv1.ValidationAction{admv1.Deny}) {
		t.Errorf("%s: policy binding %+v, want policy %s with Deny", file, pb.Spec, sa)
	}
	if pol.Spec.FailurePolicy == nil || *pol.Spec.FailurePolicy != admv1.Fail {
		t.Errorf("%s: failurePolicy %v, want Fail", file, pol.Spec.FailurePolicy)
	}
	user := "'system:serviceaccount:kube-system:" + sa + "'"
	if len(pol.Spec.MatchConditions) != 1 || !strings.Contains(pol.Spec.MatchConditions[0].Expression, "request.userInfo.username == "+user) {
		t.Errorf("%s: the policy's match conditions %+v do not select the agent's user %s", file, pol.Spec.MatchConditions, user)
	}
}

// TestRBAC: cnibox.yaml's agent gets what the features its command turns on
// use, and nothing else.
func TestRBAC(t *testing.T) {
	m := load(t)
	if m.sa.Name != "cnibox" || m.sa.Namespace != "kube-system" || m.ds.Spec.Template.Spec.ServiceAccountName != m.sa.Name {
		t.Errorf("service account %s/%s, the DaemonSet's %s", m.sa.Namespace, m.sa.Name, m.ds.Spec.Template.Spec.ServiceAccountName)
	}
	checkRBAC(t, "cnibox.yaml", m.sa.Name, m.ds.Spec.Template.Spec.Containers[0].Command)
}

// TestMultusRBAC: the same for cnibox-multus.yaml (the pod API and the
// cluster IPAM, no overlay).
func TestMultusRBAC(t *testing.T) {
	m := loadMultus(t)
	if m.sa.Name != "cnibox-multus" || m.ds.Spec.Template.Spec.ServiceAccountName != m.sa.Name || m.ds.Namespace != m.sa.Namespace {
		t.Errorf("service account %s/%s, the DaemonSet's %s", m.sa.Namespace, m.sa.Name, m.ds.Spec.Template.Spec.ServiceAccountName)
	}
	checkRBAC(t, "cnibox-multus.yaml", m.sa.Name, m.ds.Spec.Template.Spec.Containers[0].Command)
}

// TestPoliciesAlike: cnibox-multus.yaml's admission policy is cnibox.yaml's
// but for the account it matches (test/rbac runs both on an API server).
func TestPoliciesAlike(t *testing.T) {
	a, b := loadRBAC(t, "cnibox.yaml").policies["cnibox"], loadRBAC(t, "cnibox-multus.yaml").policies["cnibox-multus"]
	if a == nil || b == nil {
		t.Fatal("a manifest lacks its policy")
	}
	sb := b.Spec.DeepCopy()
	sb.MatchConditions[0].Expression = strings.Replace(sb.MatchConditions[0].Expression, "kube-system:cnibox-multus'", "kube-system:cnibox'", 1)
	if !reflect.DeepEqual(a.Spec, *sb) {
		t.Errorf("the policies differ beyond the account:\n%+v\n%+v", a.Spec, *sb)
	}
}
