package dataplane

import "net"

// GatewayMAC is the inner Ethernet source of encapsulated frames: the
// virtual router of every tenant subnet. Edges and agents must agree on
// it, so it lives below both.
var GatewayMAC = net.HardwareAddr{0x02, 0xa2, 0x9a, 0x7e, 0x00, 0x01}
