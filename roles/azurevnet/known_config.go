package azurevnet

import "github.com/cnibox/cnibox/roles/bridge"

// knownConfig are the structs azure-vnet decodes, for cnibox check
// (cniplug.Known.Config): transparent mode's config (with the fields both
// modes share) and, for bridge mode, every field of the bridge role, whose
// parser that mode runs (isGateway and isDefaultGateway are read and
// ignored there: docs/roles/azure-vnet.md says so).
var knownConfig = []any{(*tconf)(nil), (*bridge.Conf)(nil), (*azureIgnored)(nil)}

// azureIgnored are Azure's fields that cnibox accepts and ignores (its
// logging, CNS, multitenancy, SNAT-on-host and Windows paths), so that
// Azure's conflists load unchanged and check warns of none of them.
type azureIgnored struct {
	LogTarget                     any `json:"logTarget"`
	ExecutionMode                 any `json:"executionMode"`
	InfraVnetAddressSpace         any `json:"infraVnetAddressSpace"`
	PodNamespaceForDualNetwork    any `json:"podNamespaceForDualNetwork"`
	EnableExactMatchForPodName    any `json:"enableExactMatchForPodName"`
	EnableSnatOnHost              any `json:"enableSnatOnHost"`
	DisableHairpinOnHostInterface any `json:"disableHairpinOnHostInterface"`
	IPv6Mode                      any `json:"ipv6Mode"`
	VnetCidrs                     any `json:"vnetCidrs"`
	ServiceCidrs                  any `json:"serviceCidrs"`
	CNSURL                        any `json:"cnsurl"`
	WindowsSettings               any `json:"windowsSettings"`
	AdditionalArgs                any `json:"AdditionalArgs"`
}
