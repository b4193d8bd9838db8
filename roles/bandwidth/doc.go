// Package bandwidth is the bandwidth role: rate limits with tc token bucket
// filters, to the pod on the host veth and from the pod on an ifb device.
package bandwidth
