// Package tuning is the tuning role: network sysctls in the pod and the MAC,
// MTU, promiscuous and all-multicast modes and txqueuelen of CNI_IFNAME,
// recorded and restored on DEL.
package tuning
