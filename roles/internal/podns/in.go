package podns

import "github.com/cnibox/cnibox/netops"

// In runs f with the namespace at netns open (code 3 when it cannot be
// opened, as Open) and closes it after.
func In(netns string, f func(pod *netops.Handle) error) error {
	pod, err := Open(netns)
	if err != nil {
		return err
	}
	defer pod.Close()
	return f(pod)
}
