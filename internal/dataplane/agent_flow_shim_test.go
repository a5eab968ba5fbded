package dataplane

import "net/netip"

// The benchmark's setup, apart so that the same benchmark runs on a tree
// whose types differ (a before/after comparison).

func agentFlowBenchMarkService(e *AgentEIP) { e.Service = true }

func agentFlowBenchService(vip, guest netip.Addr, _ uint32) AgentService {
	return AgentService{VIP: vip, Guest: guest, Proto: ProtoTCP, VPort: 80, VSID: vsid}
}
