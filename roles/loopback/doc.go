// Package loopback is the loopback role: the pod's lo up on ADD and down on
// DEL, as the reference plugin does.
package loopback
