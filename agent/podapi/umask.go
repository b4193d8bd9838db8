package podapi

import "syscall"

// umask sets the process umask and returns the previous one; the socket is
// created with 0600 from the start, with no window in which others could
// connect.
func umask(m int) int { return syscall.Umask(m) }
