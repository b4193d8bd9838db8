// Package cloudipam is cloud IPAM: pods get addresses straight out of the
// VNet or VPC, from the secondary IPs the cloud assigned to the node's NICs.
// The "cloud-ipam" role asks the provider named by "provider" (azure: the
// host agent's getinterfaceinfov1 XML; aws: IMDSv2; file: a JSON pool file),
// and "azure-vnet-ipam" is the same with provider azure, as a drop-in for
// Azure's plugin of that name.
//
// The provider's answer is cached in the store next to the network's
// reservations and asked again at most every queryInterval; addresses are
// chosen by the shared allocator (package ipam, through ipam.AllocatePools),
// so requested, retried and sticky addresses behave as with host-local.
package cloudipam
