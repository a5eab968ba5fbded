package model

// Limits are an EIP's or a service VIP's rate limits, enforced by every
// edge's data plane on traffic from the Internet side (docs/dataplane.md,
// "Rate limits"): at most SourcePPS packets per second from any one
// source address, and at most SYNRate TCP SYNs (without ACK) per second to
// the address from all sources together (the SYN guard). A rate of 0
// turns that limit off; a burst of 0 is one second's worth of its rate.
type Limits struct {
	SourcePPS   uint32 `json:"sourcePps,omitempty"`
	SourceBurst uint32 `json:"sourceBurst,omitempty"`
	SYNRate     uint32 `json:"synRate,omitempty"`
	SYNBurst    uint32 `json:"synBurst,omitempty"`
}

// MaxLimitRate bounds a rate and a burst of Limits: the data plane's
// bucket (an interval of 1e9 / rate ns) is accurate to 1 % up to it.
const MaxLimitRate = 10_000_000

// validate checks limits under field ("limits").
func (l *Limits) validate(es *Errors, field string) {
	if l == nil {
		return
	}
	if l.SourcePPS == 0 && l.SYNRate == 0 {
		es.add(field, "sets no limit: give sourcePps or synRate (or leave limits out)")
	}
	checkLimit(es, field, "sourcePps", "sourceBurst", l.SourcePPS, l.SourceBurst)
	checkLimit(es, field, "synRate", "synBurst", l.SYNRate, l.SYNBurst)
}

func checkLimit(es *Errors, field, rateName, burstName string, rate, burst uint32) {
	if rate > MaxLimitRate {
		es.add(field+"."+rateName, "%d per second: at most %d", rate, MaxLimitRate)
	}
	if burst > MaxLimitRate {
		es.add(field+"."+burstName, "%d: at most %d", burst, MaxLimitRate)
	}
	if burst != 0 && rate == 0 {
		es.add(field+"."+burstName, "set without %s (a burst of no limit)", rateName)
	}
}

// Clone copies limits (nil stays nil).
func (l *Limits) Clone() *Limits {
	if l == nil {
		return nil
	}
	c := *l
	return &c
}
