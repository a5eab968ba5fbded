package packaging

import _ "embed"

// Dashboard is the Grafana dashboard, grafana/azgate.json, and AlertRules
// the Prometheus alert rules, prometheus/azgate-rules.yml, as shipped in
// the package: the lab's Prometheus loads the rules and its dashboard
// renderer draws the dashboard (azgate-lab lab prometheus, lab dashboard).
var (
	//go:embed grafana/azgate.json
	Dashboard []byte
	//go:embed prometheus/azgate-rules.yml
	AlertRules []byte
)
