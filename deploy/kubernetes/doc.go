// Package kubernetes holds cnibox's Kubernetes manifests: cnibox.yaml (one
// `kubectl apply` sets up every node), cnibox-multus.yaml (cnibox as Multus
// over any primary CNI) and nad-crd.yaml (the NetworkAttachmentDefinition
// CRD, applied once and kept out of the other two so that `kubectl delete
// -f` leaves the NADs; docs/deploy.md). Its tests decode
// every object into the API types and run the manifest's install step and
// agent flags against the binaries.
package kubernetes
