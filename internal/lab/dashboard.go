package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The lab's dashboard (issue 20): Grafana is not in Debian and the lab
// fetches no binaries, so lab dashboard renders the Grafana dashboard
// JSON itself, packaging/grafana/azgate.json, the file operators import:
// its template variables substituted, each panel's queries run against
// the lab's Prometheus (query_range over the last minutes), every panel
// drawn as an SVG chart (timeseries) or numbers (stat) on one static
// HTML page. It is a renderer of the same JSON for the lab, not Grafana:
// it reads only the fields it needs (title, type, gridPos, targets' expr
// and legendFormat, the variables' names, includeAll and allValue).

// Dashboard is the part of a Grafana dashboard JSON the renderer reads.
type Dashboard struct {
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			IncludeAll bool   `json:"includeAll"`
			AllValue   string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
}

// Panel is one panel: a row header, a timeseries or a stat.
type Panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	GridPos struct {
		W int `json:"w"`
		H int `json:"h"`
	} `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

// ParseDashboard reads a Grafana dashboard JSON.
func ParseDashboard(b []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	if len(d.Panels) == 0 {
		return nil, fmt.Errorf("dashboard JSON: no panels")
	}
	return &d, nil
}

// DashboardOptions are a rendering's range and variables.
type DashboardOptions struct {
	Prometheus string        // base URL, e.g. http://127.0.0.1:9491
	Window     time.Duration // the range: the last Window before End
	End        time.Time     // default: now
	// Vars are the template variables' values (a regular expression
	// for a multi-value one, as Grafana substitutes it into =~); a
	// variable not given takes its allValue, or .*.
	Vars map[string]string
	// Scrape is Prometheus' scrape interval, for $__rate_interval;
	// default ScrapeInterval.
	Scrape time.Duration
}

// Series is one line of a panel.
type Series struct {
	Name   string
	Times  []time.Time
	Values []float64
}

// Last is the series' last value (NaN if it has none).
func (s Series) Last() float64 {
	if len(s.Values) == 0 {
		return math.NaN()
	}
	return s.Values[len(s.Values)-1]
}

// Max is the series' largest value (NaN if it has none).
func (s Series) Max() float64 {
	m := math.NaN()
	for _, v := range s.Values {
		if math.IsNaN(m) || v > m {
			m = v
		}
	}
	return m
}

// PanelData is a panel's queries (as run) and their series.
type PanelData struct {
	Panel
	Queries []string
	Series  []Series
	Errors  []string
}

// DashboardData is a whole dashboard's results.
type DashboardData struct {
	Title       string
	Prometheus  string
	Start, End  time.Time
	Step        time.Duration
	Vars        map[string]string
	Panels      []PanelData
	GeneratedBy string
}

// Panel returns the panel titled title.
func (d *DashboardData) Panel(title string) (PanelData, bool) {
	for _, p := range d.Panels {
		if p.Title == title {
			return p, true
		}
	}
	return PanelData{}, false
}

var varRE = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// Expand substitutes a query's template variables: the dashboard's (from
// vars), $__rate_interval, $__interval and $__range.
func Expand(expr string, vars map[string]string, step, scrape, window time.Duration) string {
	rate := max(step+scrape, 4*scrape)
	return varRE.ReplaceAllStringFunc(expr, func(m string) string {
		sm := varRE.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		switch name {
		case "__rate_interval":
			return promDuration(rate)
		case "__interval":
			return promDuration(step)
		case "__range":
			return promDuration(window)
		}
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}

func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
}

// QueryDashboard runs every panel's queries over the range.
func QueryDashboard(ctx context.Context, d *Dashboard, o DashboardOptions) (*DashboardData, error) {
	if o.Window <= 0 {
		o.Window = 10 * time.Minute
	}
	if o.End.IsZero() {
		o.End = time.Now()
	}
	if o.Scrape <= 0 {
		o.Scrape = ScrapeInterval
	}
	if _, err := url.Parse(o.Prometheus); err != nil || o.Prometheus == "" {
		return nil, fmt.Errorf("prometheus URL %q: want http://HOST:PORT", o.Prometheus)
	}
	// About 200 points a chart, no finer than the scrape.
	step := max(o.Window/200, o.Scrape).Truncate(time.Second)
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			continue
		}
		val := v.AllValue
		if val == "" {
			val = ".*"
		}
		vars[v.Name] = val
	}
	for k, v := range o.Vars {
		vars[k] = v
	}
	out := &DashboardData{Title: d.Title, Prometheus: o.Prometheus, Start: o.End.Add(-o.Window), End: o.End, Step: step, Vars: vars}
	c := &http.Client{Timeout: 30 * time.Second}
	for _, p := range d.Panels {
		pd := PanelData{Panel: p}
		for _, t := range p.Targets {
			q := Expand(t.Expr, vars, step, o.Scrape, o.Window)
			pd.Queries = append(pd.Queries, q)
			res, err := queryRange(ctx, c, o.Prometheus, q, out.Start, out.End, step)
			if err != nil {
				pd.Errors = append(pd.Errors, err.Error())
				continue
			}
			for _, r := range res {
				s := Series{Name: legend(t.LegendFormat, r.Metric)}
				for _, v := range r.Values {
					ts, _ := v[0].(float64)
					str, _ := v[1].(string)
					f, err := strconv.ParseFloat(str, 64)
					if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
						continue
					}
					s.Times = append(s.Times, time.UnixMilli(int64(ts*1000)))
					s.Values = append(s.Values, f)
				}
				pd.Series = append(pd.Series, s)
			}
		}
		sort.SliceStable(pd.Series, func(i, j int) bool { return pd.Series[i].Name < pd.Series[j].Name })
		out.Panels = append(out.Panels, pd)
	}
	return out, nil
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// queryRange runs GET /api/v1/query_range.
func queryRange(ctx context.Context, c *http.Client, base, q string, start, end time.Time, step time.Duration) ([]promSeries, error) {
	v := url.Values{"query": {q}, "start": {strconv.FormatInt(start.Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)},
		"step": {promDuration(step)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/api/v1/query_range?"+v.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string       `json:"resultType"`
			Result     []promSeries `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %q: %s: %w", q, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", q, body.ErrorType, body.Error)
	}
	if body.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("query %q: result type %q, want matrix", q, body.Data.ResultType)
	}
	return body.Data.Result, nil
}

var legendRE = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legend fills a legendFormat's {{label}}s; no format: the series' labels.
func legend(format string, m map[string]string) string {
	if format == "" {
		var kv []string
		for k, v := range m {
			kv = append(kv, k+"="+strconv.Quote(v))
		}
		sort.Strings(kv)
		return "{" + strings.Join(kv, ", ") + "}"
	}
	return strings.TrimSpace(legendRE.ReplaceAllStringFunc(format, func(s string) string {
		return m[legendRE.FindStringSubmatch(s)[1]]
	}))
}

// The charts.
const (
	chartH     = 150
	chartPadL  = 64 // the y axis' labels
	chartPadR  = 10
	chartPadT  = 10
	chartPadB  = 24 // the x axis' labels
	colWidth   = 56 // SVG units per grid column (of 24)
	maxDrawn   = 24 // series drawn per panel (the legend says how many more)
	maxLegend  = 8
	gridColumn = 24
)

var palette = []string{"#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0", "#508642", "#cca300", "#447ebc", "#c15c17"}

type chartLine struct {
	Color  string
	Points []string // polyline segments, "x,y x,y ..."
}

type legendItem struct {
	Color, Name, Last, Max string
}

type tick struct {
	Pos    float64
	Label  string
	Anchor string // an x tick's text-anchor
}

type chart struct {
	W, H, PlotW, PlotH, PadL, PadT, Bottom, Right float64
	Lines                                         []chartLine
	YTicks, XTicks                                []tick
}

type panelView struct {
	Title   string
	Type    string
	Span    int
	Row     bool
	Chart   *chart
	Stats   []legendItem
	Legend  []legendItem
	More    int
	Empty   bool
	Errors  []string
	Queries []string
}

// RenderDashboard writes d as a static HTML page, an SVG chart per
// timeseries panel, the last values of a stat panel's series as numbers.
func RenderDashboard(w io.Writer, d *DashboardData) error {
	var views []panelView
	for _, p := range d.Panels {
		v := panelView{Title: p.Title, Type: p.Type, Span: p.GridPos.W, Errors: p.Errors, Queries: p.Queries}
		if v.Span <= 0 || v.Span > gridColumn {
			v.Span = gridColumn
		}
		switch p.Type {
		case "row":
			v.Row = true
		case "stat":
			for i, s := range p.Series {
				v.Stats = append(v.Stats, legendItem{Color: palette[i%len(palette)], Name: s.Name, Last: formatValue(s.Last())})
			}
			v.Empty = len(p.Series) == 0
		default:
			if v.Empty = len(p.Series) == 0; !v.Empty {
				v.Chart, v.Legend, v.More = drawChart(p.Series, d.Start, d.End, d.Step, float64(v.Span*colWidth))
			}
		}
		views = append(views, v)
	}
	var vars []string
	for k, v := range d.Vars {
		vars = append(vars, k+" = "+v)
	}
	sort.Strings(vars)
	return dashboardTmpl.Execute(w, map[string]any{
		"Title": d.Title, "Prometheus": d.Prometheus, "Start": d.Start.UTC().Format(time.RFC3339), "End": d.End.UTC().Format(time.RFC3339),
		"Step": d.Step.String(), "Vars": strings.Join(vars, ", "), "Panels": views,
	})
}

func drawChart(series []Series, start, end time.Time, step time.Duration, width float64) (*chart, []legendItem, int) {
	c := &chart{W: width, H: chartH, PadL: chartPadL, PadT: chartPadT}
	c.PlotW = width - chartPadL - chartPadR
	c.PlotH = chartH - chartPadT - chartPadB
	c.Bottom = c.PadT + c.PlotH
	c.Right = c.PadL + c.PlotW
	lo, hi := math.Inf(1), math.Inf(-1)
	// The largest first: the drawn and listed series are the busiest.
	drawn := append([]Series(nil), series...)
	sort.SliceStable(drawn, func(i, j int) bool { return drawn[i].Max() > drawn[j].Max() })
	more := 0
	if len(drawn) > maxDrawn {
		more = len(drawn) - maxDrawn
		drawn = drawn[:maxDrawn]
	}
	for _, s := range drawn {
		for _, v := range s.Values {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	if lo > 0 {
		lo = 0
	}
	if hi <= lo {
		hi = lo + 1
	}
	span := float64(end.Sub(start))
	x := func(t time.Time) float64 { return c.PadL + c.PlotW*float64(t.Sub(start))/span }
	y := func(v float64) float64 { return c.PadT + c.PlotH*(1-(v-lo)/(hi-lo)) }
	for i := 0; i <= 4; i++ {
		v := lo + (hi-lo)*float64(i)/4
		c.YTicks = append(c.YTicks, tick{Pos: y(v), Label: formatValue(v)})
		t := start.Add(time.Duration(span * float64(i) / 4))
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case 4:
			anchor = "end"
		}
		c.XTicks = append(c.XTicks, tick{Pos: x(t), Label: t.UTC().Format("15:04:05"), Anchor: anchor})
	}
	var leg []legendItem
	for i, s := range drawn {
		col := palette[i%len(palette)]
		l := chartLine{Color: col}
		var seg []string
		for j, v := range s.Values {
			// A gap of more than two steps ends a line.
			if j > 0 && s.Times[j].Sub(s.Times[j-1]) > 2*step && len(seg) > 0 {
				l.Points = append(l.Points, strings.Join(seg, " "))
				seg = nil
			}
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x(s.Times[j]), y(v)))
		}
		if len(seg) == 1 { // a lone point: a short tick
			seg = append(seg, seg[0])
		}
		if len(seg) > 0 {
			l.Points = append(l.Points, strings.Join(seg, " "))
		}
		c.Lines = append(c.Lines, l)
		if i < maxLegend {
			leg = append(leg, legendItem{Color: col, Name: s.Name, Last: formatValue(s.Last()), Max: formatValue(s.Max())})
		}
	}
	more += len(drawn) - len(leg)
	return c, leg, more
}

// formatValue is v with an SI prefix, 3 significant digits.
func formatValue(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	a := math.Abs(v)
	for _, u := range []struct {
		f float64
		s string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if a >= u.f {
			return strconv.FormatFloat(v/u.f, 'g', 3, 64) + u.s
		}
	}
	if a != 0 && a < 0.01 {
		return strconv.FormatFloat(v, 'e', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

var dashboardTmpl = template.Must(template.New("dashboard").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} (azgate lab)</title>
<style>
body { background: #111217; color: #ccccdc; font: 13px sans-serif; margin: 12px; }
h1 { font-size: 20px; margin: 0 0 4px; }
.meta { color: #8e8e9e; margin-bottom: 12px; }
.grid { display: grid; grid-template-columns: repeat(24, 1fr); gap: 8px; }
.row { grid-column: span 24; font-size: 16px; font-weight: bold; border-bottom: 1px solid #333; padding: 8px 0 2px; }
.panel { background: #181b1f; border: 1px solid #2c3235; border-radius: 3px; padding: 6px; min-width: 0; }
.panel h2 { font-size: 13px; margin: 0 0 4px; }
.panel svg { width: 100%; height: auto; display: block; }
.axis { stroke: #444; stroke-width: 1; }
.grid-line { stroke: #2a2d31; stroke-width: 1; }
.tick { fill: #8e8e9e; font-size: 10px; }
.legend { font-size: 11px; margin: 4px 0 0; padding: 0; list-style: none; }
.legend li { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.sw { display: inline-block; width: 10px; height: 3px; margin-right: 4px; vertical-align: middle; }
.stats { display: flex; flex-wrap: wrap; gap: 12px; }
.stat { min-width: 90px; }
.stat .v { font-size: 32px; font-weight: bold; }
.empty { color: #8e8e9e; padding: 40px 0; text-align: center; }
.err { color: #e24d42; font-size: 11px; }
details { font-size: 10px; color: #8e8e9e; }
code { word-break: break-all; }
</style></head>
<body>
<h1>{{.Title}}</h1>
<div class="meta">azgate lab: packaging/grafana/azgate.json rendered by azgate-lab lab dashboard (a renderer of the dashboard's JSON for the lab, not Grafana) from {{.Prometheus}}, {{.Start}} to {{.End}} UTC, step {{.Step}}; {{.Vars}}</div>
<div class="grid">
{{range .Panels}}{{if .Row}}<div class="row">{{.Title}}</div>
{{else}}<div class="panel" style="grid-column: span {{.Span}}">
<h2>{{.Title}}</h2>
{{if .Empty}}<div class="empty">No data</div>{{end}}
{{if .Stats}}<div class="stats">{{range .Stats}}<div class="stat"><div class="v" style="color: {{.Color}}">{{.Last}}</div><div>{{.Name}}</div></div>{{end}}</div>{{end}}
{{with .Chart}}{{$c := .}}<svg viewBox="0 0 {{.W}} {{.H}}" xmlns="http://www.w3.org/2000/svg" role="img">
{{range .YTicks}}<line class="grid-line" x1="{{$c.PadL}}" y1="{{.Pos}}" x2="{{$c.Right}}" y2="{{.Pos}}"/><text class="tick" x="{{$c.PadL}}" dx="-4" y="{{.Pos}}" dy="3" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<text class="tick" x="{{.Pos}}" y="{{$c.Bottom}}" dy="14" text-anchor="{{.Anchor}}">{{.Label}}</text>
{{end}}<line class="axis" x1="{{.PadL}}" y1="{{.Bottom}}" x2="{{.Right}}" y2="{{.Bottom}}"/><line class="axis" x1="{{.PadL}}" y1="{{.PadT}}" x2="{{.PadL}}" y2="{{.Bottom}}"/>
{{range .Lines}}{{$col := .Color}}{{range .Points}}<polyline fill="none" stroke="{{$col}}" stroke-width="1.5" points="{{.}}"/>{{end}}
{{end}}</svg>{{end}}
{{if .Legend}}<ul class="legend">{{range .Legend}}<li><span class="sw" style="background: {{.Color}}"></span>{{.Name}} &nbsp; last {{.Last}} &nbsp; max {{.Max}}</li>{{end}}{{if .More}}<li>and {{.More}} more series</li>{{end}}</ul>{{end}}
{{range .Errors}}<div class="err">{{.}}</div>{{end}}
<details><summary>queries</summary>{{range .Queries}}<div><code>{{.}}</code></div>{{end}}</details>
</div>
{{end}}{{end}}
</div>
</body></html>
`))
