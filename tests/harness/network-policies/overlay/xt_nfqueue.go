// Added to sigs.k8s.io/kube-network-policies/pkg/networkpolicy at build time (a scratch copy,
// tests/harness/build.sh): the NFQUEUE verdict as xtables' target through nft_compat, for kernels
// built without nft_queue (CONFIG_NFT_QUEUE unset) but with CONFIG_NETFILTER_XT_TARGET_NFQUEUE
// and CONFIG_NFT_COMPAT, such as this machine's. `nft list ruleset` shows it as
// `queue num N bypass`, the same verdict upstream's expr.Queue gives.
package networkpolicy

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// xtNFQueue is `NFQUEUE --queue-num num [--queue-bypass]`: struct xt_NFQ_info_v3 {u16 queuenum;
// u16 queues_total; u16 flags}, host byte order, padded to XT_ALIGN (8).
func xtNFQueue(num uint16, bypass bool) expr.Any {
	info := make(xt.Unknown, 8)
	binary.NativeEndian.PutUint16(info[0:], num)
	binary.NativeEndian.PutUint16(info[2:], 1) // queues_total: one queue (0 is refused)
	if bypass {
		binary.NativeEndian.PutUint16(info[4:], 1) // NFQ_FLAG_BYPASS
	}
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}
