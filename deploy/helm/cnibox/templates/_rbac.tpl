{{- /*
The agent's RBAC and admission policy pieces both agents share: cnibox's
(rbac.yaml, the primary) and cnibox-multus' (multus.yaml, mode multus), as
their manifests have them. Each takes a dict: sa (the service account, the
objects' name prefix and app label), ns (the release's namespace) and, for
the cluster IPAM, ipamNs (the pools' namespace).
*/ -}}

{{/* cnibox.podAPIRBAC: the pod API's role and binding. */}}
{{- define "cnibox.podAPIRBAC" -}}
# the pod API (--pod-api, the multi role's)
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .sa }}-pod-api
  labels:
    app: {{ .sa }}
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["k8s.cni.cncf.io"]
  resources: ["network-attachment-definitions"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .sa }}-pod-api
  labels:
    app: {{ .sa }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .sa }}-pod-api
subjects:
- kind: ServiceAccount
  name: {{ .sa }}
  namespace: {{ .ns }}
{{- end -}}

{{/* cnibox.clusterIPAMRBAC: the cluster IPAM's roles and bindings. */}}
{{- define "cnibox.clusterIPAMRBAC" -}}
# the cluster IPAM (--cluster-ipam): the reclaim reads the cluster's pods
# (list, watch: the informer cache) ...
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .sa }}-cluster-ipam
  labels:
    app: {{ .sa }}
rules:
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .sa }}-cluster-ipam
  labels:
    app: {{ .sa }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .sa }}-cluster-ipam
subjects:
- kind: ServiceAccount
  name: {{ .sa }}
  namespace: {{ .ns }}
---
# ... and, in the pools' namespace only, the pools and the reclaim's Lease
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .sa }}-cluster-ipam
  namespace: {{ .ipamNs }}
  labels:
    app: {{ .sa }}
rules:
- apiGroups: ["whereabouts.cni.cncf.io"]
  resources: ["ippools"]
  verbs: ["get", "list", "watch", "create", "update"]
- apiGroups: ["whereabouts.cni.cncf.io"]
  resources: ["overlappingrangeipreservations"]
  verbs: ["get", "list", "create", "delete"]
- apiGroups: ["whereabouts.cni.cncf.io"]
  resources: ["nodeslicepools"]
  verbs: ["get", "list", "create", "update"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: ["cnibox-whereabouts-reclaim"]
  verbs: ["get", "update"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .sa }}-cluster-ipam
  namespace: {{ .ipamNs }}
  labels:
    app: {{ .sa }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .sa }}-cluster-ipam
subjects:
- kind: ServiceAccount
  name: {{ .sa }}
  namespace: {{ .ns }}
{{- end -}}

{{/* cnibox.agentPolicy: the admission policy and its binding. */}}
{{- define "cnibox.agentPolicy" -}}
# What RBAC cannot say: the agent writes its own node's status and its own
# node's pods' network-status annotation only, and creates no Lease but its
# own (docs/security.md).
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ .sa }}
  labels:
    app: {{ .sa }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["UPDATE"]
      resources: ["pods", "nodes/status"]
    - apiGroups: ["coordination.k8s.io"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["leases"]
  matchConditions:
  - name: the-agent
    expression: "request.userInfo.username == 'system:serviceaccount:{{ .ns }}:{{ .sa }}'"
  variables:
  - name: node
    expression: "request.userInfo.?extra[?'authentication.kubernetes.io/node-name'].orValue([])"
  - name: own
    expression: "variables.node.size() == 1 && (request.resource.resource == 'nodes' ? object.metadata.name : object.spec.nodeName) == variables.node[0]"
  - name: labels
    expression: "object.metadata.?labels.orValue({})"
  - name: oldLabels
    expression: "oldObject.metadata.?labels.orValue({})"
  - name: annotations
    expression: "object.metadata.?annotations.orValue({})"
  - name: oldAnnotations
    expression: "oldObject.metadata.?annotations.orValue({})"
  validations:
  - expression: "request.resource.resource == 'leases' || variables.own"
    messageExpression: "'cnibox: the agent of node ' + variables.node.join(',') + ' may not write ' + request.resource.resource + ' ' + object.metadata.name + ': only its own node and its pods (with a token bound to the agent pod)'"
    reason: Forbidden
  - expression: >-
      request.resource.resource != 'pods' || (
      object.spec == oldObject.spec &&
      variables.labels == variables.oldLabels &&
      object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([]) &&
      object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([]) &&
      variables.annotations.all(k, k == 'k8s.v1.cni.cncf.io/network-status' || (k in variables.oldAnnotations && variables.oldAnnotations[k] == variables.annotations[k])) &&
      variables.oldAnnotations.all(k, k == 'k8s.v1.cni.cncf.io/network-status' || k in variables.annotations))
    message: "cnibox: the agent may change a pod's k8s.v1.cni.cncf.io/network-status annotation and nothing else"
    reason: Forbidden
  - expression: >-
      request.resource.resource != 'nodes' || (
      variables.labels.all(k, k == 'cnibox.io/overlay-metadata' || (k in variables.oldLabels && variables.oldLabels[k] == variables.labels[k])) &&
      variables.oldLabels.all(k, k == 'cnibox.io/overlay-metadata' || k in variables.labels) &&
      object.status.?addresses.orValue([]) == oldObject.status.?addresses.orValue([]) &&
      object.status.?conditions.orValue([]).filter(c, c.type != 'NetworkUnavailable') == oldObject.status.?conditions.orValue([]).filter(c, c.type != 'NetworkUnavailable'))
    message: "cnibox: the agent may change its node's annotations, its cnibox.io/overlay-metadata label and its NetworkUnavailable condition, nothing else"
    reason: Forbidden
  - expression: >-
      request.resource.resource != 'leases' || object.metadata.name in ['cnibox-whereabouts-reclaim', 'cnibox-lb-ipam'] || (
      (object.metadata.name.startsWith('cnibox-egress-') || object.metadata.name.startsWith('cnibox-lb-')) && variables.node.size() == 1 && (
      object.spec.?holderIdentity.orValue('') == variables.node[0] ||
      (request.operation == 'UPDATE' && object.spec.?holderIdentity.orValue('') == '' && oldObject.spec.?holderIdentity.orValue('') == variables.node[0])))
    message: "cnibox: the agent may write the Leases cnibox-whereabouts-reclaim and cnibox-lb-ipam and the Leases cnibox-egress-* and cnibox-lb-* (the egress and LoadBalancer addresses) holding them for its own node (or releasing its own), no other"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ .sa }}
  labels:
    app: {{ .sa }}
spec:
  policyName: {{ .sa }}
  validationActions: [Deny]
---
# Only the agents write a pod's k8s.v1.cni.cncf.io/network-status
# annotation, which MultiNetworkPolicy reads for the pods' addresses on the
# secondary networks: anyone who may patch pods in a namespace could
# otherwise put any address into another namespace's allowed peers
# (docs/security.md). A pod may not be created with it, and only the
# agents (the policy above narrows each to its own node's pods) change it.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: cnibox-network-status
  labels:
    app: cnibox
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["pods", "pods/status"]
  matchConditions:
  - name: not-an-agent
    expression: "!(request.userInfo.username in ['system:serviceaccount:{{ .ns }}:cnibox', 'system:serviceaccount:{{ .ns }}:cnibox-multus'])"
  variables:
  - name: key
    expression: "'k8s.v1.cni.cncf.io/network-status'"
  - name: annotations
    expression: "object.metadata.?annotations.orValue({})"
  - name: oldAnnotations
    expression: "request.operation == 'CREATE' ? {} : oldObject.metadata.?annotations.orValue({})"
  validations:
  - expression: >-
      (variables.key in variables.annotations) == (variables.key in variables.oldAnnotations) &&
      (!(variables.key in variables.annotations) || variables.annotations[variables.key] == variables.oldAnnotations[variables.key])
    messageExpression: "'cnibox: only the CNI agents write a pod\\'s k8s.v1.cni.cncf.io/network-status annotation, not ' + request.userInfo.username + ': leave it out of the pod (and its template)'"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: cnibox-network-status
  labels:
    app: cnibox
spec:
  policyName: cnibox-network-status
  validationActions: [Deny]
{{- end -}}

{{/* cnibox.multiNetworkPolicyRBAC: MultiNetworkPolicy's role and binding
(--multi-network-policies): the policies, and every pod (its labels and
network-status: any pod of a secondary network is a peer) and namespace. */}}
{{- define "cnibox.multiNetworkPolicyRBAC" -}}
# MultiNetworkPolicies (--multi-network-policies; their CRD installed)
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ .sa }}-multi-network-policies
  labels:
    app: {{ .sa }}
rules:
- apiGroups: ["k8s.cni.cncf.io"]
  resources: ["multi-networkpolicies"]
  verbs: ["list", "watch"]
- apiGroups: [""]
  resources: ["pods", "namespaces"]
  verbs: ["list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .sa }}-multi-network-policies
  labels:
    app: {{ .sa }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .sa }}-multi-network-policies
subjects:
- kind: ServiceAccount
  name: {{ .sa }}
  namespace: {{ .ns }}
{{- end }}
