// Package flannel is the flannel role, a drop-in for flannel's CNI plugin:
// bridge + host-local on the node subnet from subnet.env, with the delegate
// recorded and replayed on DEL.
package flannel
