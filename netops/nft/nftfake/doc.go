// Package nftfake is an in-memory nftables "kernel" for tests: what
// google/nftables' Conn (and netops/nft's raw messages on the socket under
// it) send through nftables.WithTestDial reaches a Kernel, which keeps
// tables, chains, rules, sets, maps, elements, named objects and the
// generation as the kernel does and answers in the kernel's encoding, so
// that a table's rendering and reconciling are tested as a normal user.
//
// It is the nftables room's fake, so it sits under netops/nft and, as the
// one other package beside netops/nft, imports google/nftables: it reads
// the rules it prints with the library's own expression decoders, and
// hands tests a Conn. It is never linked into a binary (TestLeanBinary;
// `go list -deps .` holds no nftfake); test helpers elsewhere
// (netops/internal/labtest) reach nftables only through netops/nft and it.
//
// What it models, as Linux 6.x does for what cnibox sends:
//
//   - batches (NFNL_MSG_BATCH_BEGIN ... END) applied whole or not at all:
//     every message is tried in order on a copy, each gets its ack (or its
//     error, always), and one error drops the copy; a committed batch that
//     changed something starts a new generation (GETGEN);
//   - tables; chains, base chains with hook, priority, type and policy;
//     rules with kernel handles (one counter per table, shared with chains,
//     sets and objects), NFTA_RULE_POSITION, append and insert, replace,
//     DELRULE by handle, of a chain or of a whole table (flush), NLM_F_ECHO
//     of added rules;
//   - sets, maps, verdict maps and object maps (interval, timeout,
//     constant, concatenated keys), anonymous sets bound to their rule; a
//     NEWSET without NLM_F_CREATE asserts the set (ENOENT when missing);
//     elements added (a clash of data is EEXIST; without NLM_F_EXCL an
//     existing element is kept and its timeout updated, as from Linux
//     6.10; Kernel.Release models an older kernel), deleted,
//     destroyed (DESTROYSETELEM ignores missing elements, not a missing
//     set or table: each DESTROY* ignores a missing object of its kind
//     only),
//     flushed, got one by one and dumped; element timeouts on the Kernel's
//     clock (real time plus what Advance added), expired elements gone from
//     every reply;
//   - named objects (counters: GETOBJ, GETOBJ_RESET);
//   - the kernel's errors for what cnibox can get wrong: ENOENT for a
//     missing table, chain, rule, set, element or object and for a jump,
//     lookup or object reference to a missing one; EEXIST with
//     NLM_F_EXCL; EBUSY deleting a chain something jumps to, a set or an
//     object a rule uses, or changing a bound constant set; EINVAL for a
//     key or value of the wrong length, a timeout on a set without the
//     timeout flag, an interval end in a set without the interval flag;
//     EOPNOTSUPP for a jump to a base chain.
//
// What it does not model it refuses: a message type it does not know
// (flowtables, traces, rule resets, ...) is answered with EOPNOTSUPP and an
// extended ack naming the type, never silently accepted, and Kernel.Err
// reports it. Expressions are stored as sent (with set IDs resolved to
// names) and never run: a packet's path is the real kernel's business
// (keep those tests on it). Intervals are not checked for overlap.
//
// A Kernel is safe for concurrent use; each Dial is one socket.
package nftfake
