package controller

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestCheckRuleBudget: the duplicate and contradiction checks of one
// write are bounded by the work they do (rules looked at, pairs of
// source prefixes compared), not only by the rules they compare: rules
// of 1024 disjoint sources each cost a million prefix pairs per
// comparison.
func TestCheckRuleBudget(t *testing.T) {
	st := model.NewState()
	tx := &txn{st: st}
	const rules = 24
	for i := range rules {
		r := &model.FirewallRule{Name: fmt.Sprintf("r%d", i), Action: model.FirewallDeny, Protocol: "tcp", Port: 80}
		for j := range model.MaxFirewallSources {
			n := i*model.MaxFirewallSources + j
			r.Sources = append(r.Sources, netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}), 32))
		}
		tx.checkRule(r)
		if _, err := st.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if tx.ruleWork > maxRuleWork+model.MaxFirewallSources*model.MaxFirewallSources {
		t.Errorf("the checks did %d units of work, budget %d", tx.ruleWork, maxRuleWork)
	}
	if len(tx.warnings) != 1 || !strings.Contains(tx.warnings[0], "checks stopped") {
		t.Errorf("warnings %q, want the one saying the checks stopped", tx.warnings)
	}
}
