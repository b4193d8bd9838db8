// Package meta holds the small and chaining roles: loopback (and later
// portmap, tuning, bandwidth, flannel and multi).
package meta
