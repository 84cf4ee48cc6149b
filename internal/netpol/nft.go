package netpol

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// TableName is the node's nftables table of the enforcer, in the inet
// family: only the enforcer writes it.
const TableName = "kubeboot-network-policy"

// Apply replaces the node's table with one that enforces verdicts, in one
// netlink transaction: the kernel swaps the old table for the new at
// once, so no packet sees half of either. The table's forward chain, at
// the filter priority, accepts replies and open connections, then sends
// each new one from an isolated pod through that pod's egress chain and
// each one to an isolated pod through its ingress chain; a chain returns
// what a rule allows and drops the rest. Traffic from the node itself to
// its pods (the kubelet's probes) does not pass the forward hook.
func Apply(conn *nftables.Conn, verdicts []Verdicts) error {
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}
	// Adding a table that exists is no error, deleting one that does not
	// is: add, delete, add again makes the new one whatever was there.
	conn.AddTable(t)
	conn.DelTable(t)
	conn.AddTable(t)
	accept := nftables.ChainPolicyAccept
	forward := conn.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	conn.AddRule(&nftables.Rule{Table: t, Chain: forward, Exprs: established()})
	for _, v := range verdicts {
		for _, dir := range []struct {
			name   string
			rules  *[]Rule
			source bool // the pod is the packet's source
		}{{"egress", v.Egress, true}, {"ingress", v.Ingress, false}} {
			if dir.rules == nil {
				continue
			}
			chain := conn.AddChain(&nftables.Chain{Name: chainName(dir.name, v.Pod), Table: t})
			for _, ip := range v.Pod.IPs {
				exprs := append(family(ip), matchAddr(ip, dir.source)...)
				conn.AddRule(&nftables.Rule{Table: t, Chain: forward, Exprs: append(exprs, &expr.Verdict{Kind: expr.VerdictJump, Chain: chain.Name})})
			}
			for _, r := range *dir.rules {
				for _, exprs := range ruleExprs(conn, t, r, !dir.source) {
					conn.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: append(exprs, &expr.Verdict{Kind: expr.VerdictReturn})})
				}
			}
			conn.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("replace nftables table inet %s: %w", TableName, err)
	}
	return nil
}

// maxChainName is the longest name the kernel gives a chain
// (NFT_NAME_MAXLEN, less its terminating zero).
const maxChainName = 255

// chainName names a pod's chain of a direction after the pod, as `nft
// list` shows it, or, for a pod whose name is too long for that, after a
// hash of it.
func chainName(direction string, pod Pod) string {
	name := direction + " " + pod.Namespace + "/" + pod.Name
	if len(name) <= maxChainName {
		return name
	}
	sum := sha256.Sum256([]byte(pod.Namespace + "/" + pod.Name))
	return direction + " " + hex.EncodeToString(sum[:16])
}

// established matches the packets of connections already allowed, and
// their related ones (ICMP errors), and accepts them.
func established() []expr.Any {
	mask := binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}
}

// family matches packets of a's IP family.
func family(a netip.Addr) []expr.Any {
	proto := byte(unix.NFPROTO_IPV6)
	if a.Is4() {
		proto = unix.NFPROTO_IPV4
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// addrPayload loads the packet's source (or destination) address of a's
// family into register 1.
func addrPayload(a netip.Addr, source bool) *expr.Payload {
	offset := uint32(16) // IPv4 destination
	switch {
	case a.Is4() && source:
		offset = 12
	case a.Is6() && source:
		offset = 8
	case a.Is6():
		offset = 24
	}
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: uint32(a.BitLen() / 8)}
}

// matchAddr matches packets whose source (or destination) is a.
func matchAddr(a netip.Addr, source bool) []expr.Any {
	return []expr.Any{addrPayload(a, source), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()}}
}

// matchPrefix matches packets whose source (or destination) is in p, or
// with op CmpOpNeq, is not.
func matchPrefix(p netip.Prefix, source bool, op expr.CmpOp) []expr.Any {
	a := p.Masked().Addr()
	bits := make([]byte, a.BitLen()/8)
	for i := 0; i < p.Bits(); i++ {
		bits[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{
		addrPayload(a, source),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(bits)), Mask: bits, Xor: make([]byte, len(bits))},
		&expr.Cmp{Op: op, Register: 1, Data: a.AsSlice()},
	}
}

// ruleExprs are the matches of one Rule, each the expressions of one
// nftables rule: per IP family of its peers, its peers (a set of host
// addresses, or each prefix) outside its exceptions, times each of its
// ports. source says whether the peer is the packet's source (ingress).
func ruleExprs(conn *nftables.Conn, t *nftables.Table, r Rule, source bool) [][]expr.Any {
	var peerMatches [][]expr.Any
	if len(r.Peers) == 0 {
		peerMatches = [][]expr.Any{nil}
	}
	for _, is4 := range []bool{true, false} {
		var hosts []netip.Addr
		for _, p := range r.Peers {
			if p.Addr().Is4() != is4 {
				continue
			}
			if p.IsSingleIP() {
				hosts = append(hosts, p.Addr())
				continue
			}
			m := append(family(p.Addr()), matchPrefix(p, source, expr.CmpOpEq)...)
			peerMatches = append(peerMatches, append(m, exceptions(r.Except, is4, source)...))
		}
		if len(hosts) == 0 {
			continue
		}
		slices.SortFunc(hosts, netip.Addr.Compare)
		hosts = slices.Compact(hosts)
		keyType := nftables.TypeIP6Addr
		if is4 {
			keyType = nftables.TypeIPAddr
		}
		set := &nftables.Set{Table: t, Anonymous: true, Constant: true, KeyType: keyType}
		var elems []nftables.SetElement
		for _, h := range hosts {
			elems = append(elems, nftables.SetElement{Key: h.AsSlice()})
		}
		if err := conn.AddSet(set, elems); err != nil {
			continue // only a set that is not constant fails
		}
		m := append(family(hosts[0]), addrPayload(hosts[0], source), &expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID})
		peerMatches = append(peerMatches, append(m, exceptions(r.Except, is4, source)...))
	}
	portMatches := [][]expr.Any{nil}
	if len(r.Ports) > 0 {
		portMatches = nil
		for _, p := range r.Ports {
			portMatches = append(portMatches, matchPorts(p))
		}
	}
	var out [][]expr.Any
	for _, pm := range peerMatches {
		for _, port := range portMatches {
			out = append(out, slices.Concat(pm, port))
		}
	}
	return out
}

// exceptions are the matches that keep a peer's exceptions of one family
// out.
func exceptions(except []netip.Prefix, is4, source bool) []expr.Any {
	var out []expr.Any
	for _, e := range except {
		if e.Addr().Is4() == is4 {
			out = append(out, matchPrefix(e, source, expr.CmpOpNeq)...)
		}
	}
	return out
}

// protocols are the IP protocol numbers of the protocols NetworkPolicy
// names.
var protocols = map[corev1.Protocol]byte{corev1.ProtocolTCP: unix.IPPROTO_TCP, corev1.ProtocolUDP: unix.IPPROTO_UDP, corev1.ProtocolSCTP: unix.IPPROTO_SCTP}

// matchPorts matches packets of p's protocol to its ports (any port of a
// zero From).
func matchPorts(p PortRange) []expr.Any {
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{protocols[p.Protocol]}},
	}
	if p.From == 0 {
		return out
	}
	dport := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
	from, to := binary.BigEndian.AppendUint16(nil, p.From), binary.BigEndian.AppendUint16(nil, p.To)
	if p.From == p.To {
		return append(out, dport, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: from})
	}
	return append(out, dport, &expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: from, ToData: to})
}
