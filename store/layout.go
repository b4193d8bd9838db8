package store

// Bucket names. See the package comment for what each holds; the buckets
// of per-attachment records are named in their records (endpointRecords, ...).
var (
	bucketIPAM = []byte("ipam")

	// Inside ipam/<network>/.
	bucketAddr4  = []byte("addr4")
	bucketAddr6  = []byte("addr6")
	bucketRuns4  = []byte("runs4")
	bucketRuns6  = []byte("runs6")
	bucketOwner  = []byte("owner")
	bucketCursor = []byte("cursor")
	bucketSticky = []byte("sticky")
)

// sep separates the parts of composite keys. Container IDs, interface names
// and network names never contain it (the CNI adapter validates them).
const sep = 0
