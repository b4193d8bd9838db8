package policynft_test

import (
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// traceTable is the table markTraced adds.
const traceTable = "nstest-trace"

// markTraced adds traceTable, which sets nftrace on what comes in on
// ifnames, to the namespace at nsPath (nstest.TraceNFT's marking: at
// prerouting, before any other table, in the bridge and inet families).
func markTraced(nsPath string, ifnames []string) error {
	f, err := os.Open(nsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return err
	}
	accept := nftables.ChainPolicyAccept
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyBridge, nftables.TableFamilyINet} {
		tb := c.AddTable(&nftables.Table{Name: traceTable, Family: fam})
		ch := c.AddChain(&nftables.Chain{Name: "pre", Table: tb, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(-450), Policy: &accept})
		for _, name := range ifnames {
			b := make([]byte, unix.IFNAMSIZ)
			copy(b, name)
			c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
				&expr.Immediate{Register: 1, Data: []byte{1}},
				&expr.Meta{Key: expr.MetaKeyNFTRACE, SourceRegister: true, Register: 1},
			}})
		}
	}
	return c.Flush()
}
