// Package sbr is the sbr role (source-based routing), a drop-in for the
// reference plugins' sbr: chained after a main plugin, it gives each address
// of CNI_IFNAME a routing table of its own holding the interface's routes and
// a rule `from <address> lookup <table>`, so that replies leave by the
// interface the request came in on.
package sbr
