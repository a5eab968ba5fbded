package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Document is a declarative description of (part of) a region: what
// `azgate apply -f` reads. Objects in it replace the stored ones of the same
// key; objects not in it are left alone.
type Document struct {
	AZs      []AZ      `json:"azs,omitempty"`
	Hosts    []Host    `json:"hosts,omitempty"`
	EdgeSets []EdgeSet `json:"edgesets,omitempty"`
	EIPs     []EIP     `json:"eips,omitempty"`
	Services []Service `json:"services,omitempty"`
	// Quarantines are usually made by the API or by DDoS detection; a
	// document may hold them too.
	Quarantines []Quarantine `json:"quarantines,omitempty"`
	// FirewallRules: firewall.go.
	FirewallRules []FirewallRule `json:"firewallrules,omitempty"`
	// BandwidthPackages: bandwidth.go.
	BandwidthPackages []BandwidthPackage `json:"bandwidthpackages,omitempty"`
	// DDoSPolicies: ddospolicy.go.
	DDoSPolicies []DDoSPolicy `json:"ddospolicies,omitempty"`
	// DNSZones and GSLBRecords: dns.go.
	DNSZones    []DNSZone    `json:"dnszones,omitempty"`
	GSLBRecords []GSLBRecord `json:"gslbrecords,omitempty"`
}

// ParseDocument reads a YAML or JSON document, rejecting unknown fields and
// objects that are invalid on their own (every error names its place, e.g.
// "hosts[2].underlay"). JSON is decoded directly: going through the YAML
// parser would cost most of the time of a million-EIP apply.
func ParseDocument(data []byte) (*Document, error) {
	js := data
	if !json.Valid(data) {
		// One JSON object followed by more: YAML would read it as a flow
		// mapping and drop the rest.
		// (Only for '{': a YAML document may begin with a quoted key.)
		var first json.RawMessage
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' && json.NewDecoder(bytes.NewReader(t)).Decode(&first) == nil {
			return nil, errors.New("trailing data after the JSON object")
		}
		var err error
		// Strict: a key twice in one mapping is an error, not "last wins".
		if js, err = yaml.YAMLToJSONStrict(data); err != nil {
			return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
		}
	}
	var d Document
	if string(js) == "null" {
		return &d, nil
	}
	if err := strictJSON(js, &d); err != nil {
		return nil, err
	}
	var es Errors
	seen := map[string]string{}
	for _, po := range d.Placed() {
		o, place := po.Obj, po.Place
		kind := KindOf(o)
		for _, fe := range o.Validate() {
			es = append(es, FieldError{Field: place + "." + fe.Field, Msg: fe.Msg})
		}
		id := kind + "/" + o.Key()
		if prev, dup := seen[id]; dup && o.Key() != "" {
			es = append(es, FieldError{Field: place, Msg: fmt.Sprintf("%s %s also appears at %s", Singular(kind), o.Key(), prev)})
		}
		seen[id] = place
	}
	if len(es) > 0 {
		return nil, es
	}
	return &d, nil
}

// PlacedObject is an object with its position in the document.
type PlacedObject struct {
	Obj   Object
	Place string // e.g. "eips[3]"
}

// Placed lists the objects in dependency order with their positions.
func (d *Document) Placed() []PlacedObject {
	var out []PlacedObject
	for i := range d.AZs {
		out = append(out, PlacedObject{&d.AZs[i], fmt.Sprintf("azs[%d]", i)})
	}
	for i := range d.Hosts {
		out = append(out, PlacedObject{&d.Hosts[i], fmt.Sprintf("hosts[%d]", i)})
	}
	for i := range d.EdgeSets {
		out = append(out, PlacedObject{&d.EdgeSets[i], fmt.Sprintf("edgesets[%d]", i)})
	}
	for i := range d.EIPs {
		out = append(out, PlacedObject{&d.EIPs[i], fmt.Sprintf("eips[%d]", i)})
	}
	for i := range d.Services {
		out = append(out, PlacedObject{&d.Services[i], fmt.Sprintf("services[%d]", i)})
	}
	for i := range d.Quarantines {
		out = append(out, PlacedObject{&d.Quarantines[i], fmt.Sprintf("quarantines[%d]", i)})
	}
	for i := range d.FirewallRules {
		out = append(out, PlacedObject{&d.FirewallRules[i], fmt.Sprintf("firewallrules[%d]", i)})
	}
	for i := range d.BandwidthPackages {
		out = append(out, PlacedObject{&d.BandwidthPackages[i], fmt.Sprintf("bandwidthpackages[%d]", i)})
	}
	for i := range d.DDoSPolicies {
		out = append(out, PlacedObject{&d.DDoSPolicies[i], fmt.Sprintf("ddospolicies[%d]", i)})
	}
	for i := range d.DNSZones {
		out = append(out, PlacedObject{&d.DNSZones[i], fmt.Sprintf("dnszones[%d]", i)})
	}
	for i := range d.GSLBRecords {
		out = append(out, PlacedObject{&d.GSLBRecords[i], fmt.Sprintf("gslbrecords[%d]", i)})
	}
	return out
}

// Objects lists the document's objects in dependency order.
func (d *Document) Objects() []Object {
	var out []Object
	for i := range d.AZs {
		out = append(out, &d.AZs[i])
	}
	for i := range d.Hosts {
		out = append(out, &d.Hosts[i])
	}
	for i := range d.EdgeSets {
		out = append(out, &d.EdgeSets[i])
	}
	for i := range d.EIPs {
		out = append(out, &d.EIPs[i])
	}
	for i := range d.Services {
		out = append(out, &d.Services[i])
	}
	for i := range d.Quarantines {
		out = append(out, &d.Quarantines[i])
	}
	for i := range d.FirewallRules {
		out = append(out, &d.FirewallRules[i])
	}
	for i := range d.BandwidthPackages {
		out = append(out, &d.BandwidthPackages[i])
	}
	for i := range d.DDoSPolicies {
		out = append(out, &d.DDoSPolicies[i])
	}
	for i := range d.DNSZones {
		out = append(out, &d.DNSZones[i])
	}
	for i := range d.GSLBRecords {
		out = append(out, &d.GSLBRecords[i])
	}
	return out
}

// Named lists, in dependency order, the kinds whose list the document
// holds, even empty ("eips: []"): the kinds apply --prune prunes. A list
// that is absent (or null) names no kind.
func (d *Document) Named() []string {
	var out []string
	for _, k := range []struct {
		kind  string
		named bool
	}{
		{KindAZ, d.AZs != nil}, {KindHost, d.Hosts != nil}, {KindEdgeSet, d.EdgeSets != nil}, {KindEIP, d.EIPs != nil},
		{KindService, d.Services != nil}, {KindQuarantine, d.Quarantines != nil}, {KindFirewallRule, d.FirewallRules != nil},
		{KindBandwidthPackage, d.BandwidthPackages != nil},
		{KindDDoSPolicy, d.DDoSPolicies != nil}, {KindDNSZone, d.DNSZones != nil}, {KindGSLBRecord, d.GSLBRecords != nil},
	} {
		if k.named {
			out = append(out, k.kind)
		}
	}
	return out
}

// Add appends o to the list of its kind.
func (d *Document) Add(o Object) error {
	switch v := o.(type) {
	case *AZ:
		d.AZs = append(d.AZs, *v)
	case *Host:
		d.Hosts = append(d.Hosts, *v)
	case *EdgeSet:
		d.EdgeSets = append(d.EdgeSets, *v)
	case *EIP:
		d.EIPs = append(d.EIPs, *v)
	case *Service:
		d.Services = append(d.Services, *v)
	case *Quarantine:
		d.Quarantines = append(d.Quarantines, *v)
	case *FirewallRule:
		d.FirewallRules = append(d.FirewallRules, *v)
	case *BandwidthPackage:
		d.BandwidthPackages = append(d.BandwidthPackages, *v)
	case *DDoSPolicy:
		d.DDoSPolicies = append(d.DDoSPolicies, *v)
	case *DNSZone:
		d.DNSZones = append(d.DNSZones, *v)
	case *GSLBRecord:
		d.GSLBRecords = append(d.GSLBRecords, *v)
	default:
		return fmt.Errorf("export: %s objects have no place in a document", KindOf(o))
	}
	return nil
}
