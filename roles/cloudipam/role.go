package cloudipam

import "github.com/cnibox/cnibox/cniplug"

// Role is the cloud-ipam IPAM plugin; "provider" picks the cloud.
var Role = newRole("cloud-ipam", "", "cloud-ipam hands out the secondary IPs that the cloud assigned to the node's NICs, "+
	"as the provider says: \"provider\": \"azure\" (the Azure host agent), \"aws\" (EC2 instance metadata, IMDSv2) or \"file\" "+
	"(a JSON pool file named by \"endpoint\"). NICs are matched to the node's interfaces by MAC (\"master\" pins one). "+
	"The answer is cached in cnibox's store and asked again at most every \"queryInterval\" (10s); when the provider "+
	"cannot be reached, addresses come from the cache. $"+EnvEndpoint+" overrides the provider's URL or file.")

// AzureRole is azure-vnet-ipam: cloud IPAM with provider azure, a drop-in for
// Azure's plugin of that name.
var AzureRole = newRole("azure-vnet-ipam", ProviderAzure, "azure-vnet-ipam hands out the secondary IPs of the node's Azure NICs, "+
	"as the Azure host agent lists them (http://168.63.129.16/machine/plugins?comp=nmagent&type=getinterfaceinfov1, "+
	"or \"endpoint\", or $"+EnvEndpoint+"), with gateway = the subnet's first host and DNS 168.63.129.16. "+
	"It is cnibox's cloud-ipam with \"provider\": \"azure\".")

// newRole returns the role that answers for provider ("": the config's).
func newRole(name, provider, about string) *cniplug.Role {
	load := func(a *cniplug.Args) (*config, error) { return loadConfig(a, provider) }
	return &cniplug.Role{
		Name:   name,
		IPAM:   true,
		About:  about,
		Add:    cniplug.AddWithConf(load, add),
		Check:  cniplug.WithConf(load, check),
		Del:    cniplug.WithConf(load, del),
		GC:     cniplug.WithConf(load, gc),
		Status: cniplug.WithConf(load, status),
	}
}
