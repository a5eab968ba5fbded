package nodemetrics

import (
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// WithNode returns g with a node label on every series (g itself when
// node is empty): the roles that build their own registries (controller,
// bwmgr, gslb, pathd, prober, announce) label their series as Registry
// labels the edges' and agents'. A series that already has a node label
// keeps its own.
func WithNode(g prometheus.Gatherer, node string) prometheus.Gatherer {
	if node == "" {
		return g
	}
	name := "node"
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				i, found := slices.BinarySearchFunc(m.Label, name, func(l *dto.LabelPair, n string) int { return strings.Compare(l.GetName(), n) })
				if found {
					continue
				}
				m.Label = slices.Insert(m.Label, i, &dto.LabelPair{Name: &name, Value: &node})
			}
		}
		return mfs, err
	})
}

// HostNode is the node label of a role whose node has no name of its
// own: the host's name up to its first dot ("" when it has none).
func HostNode() string {
	h, _ := os.Hostname()
	h, _, _ = strings.Cut(h, ".")
	return h
}
