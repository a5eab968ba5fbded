//go:build !node

package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// azgate dns zone: the GSLB's authoritative zones (docs/gslb.md,
// "Objects"). add-record and remove-record read the zone, change it and
// write it back whole.
func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "dns", Short: "DNS zones the GSLB serves (SOA, NS, static records)"}
		z := &cobra.Command{Use: "zone", Aliases: []string{"zones"}, Short: "DNS zones: SOA, NS and static records (GSLB records: azgate gslb record)"}
		z.AddCommand(zoneCreateCommand(), zoneSetCommand(), zoneAddRecordCommand(), zoneRemoveRecordCommand())
		z.AddCommand(objectCommands(model.KindDNSZone, describeZone, zoneTable)...)
		c.AddCommand(z)
		return c
	})
}

// parseZoneRecord parses --record "NAME TYPE VALUE..." (the value may hold
// spaces: MX "10 mail.example.com.", TXT text).
func parseZoneRecord(spec string, ttl uint32) (model.ZoneRecord, error) {
	f := strings.Fields(spec)
	if len(f) < 3 {
		return model.ZoneRecord{}, fmt.Errorf("--record %q: want \"NAME TYPE VALUE\" (e.g. \"www A 192.0.2.10\", \"@ MX 10 mail.example.com.\")", spec)
	}
	// Skip the name and the type by position: searching for the type's
	// text would find it inside the name ("mx mx 10 mail.example.com.").
	rest := strings.TrimSpace(strings.TrimSpace(spec)[len(f[0]):])
	value := strings.TrimSpace(rest[len(f[1]):])
	return model.ZoneRecord{Name: f[0], Type: strings.ToUpper(f[1]), TTL: ttl, Value: value}, nil
}

func zoneCreateCommand() *cobra.Command {
	var (
		ns, records      []string
		ttl, serial, min uint32
		rname            string
		replace          bool
	)
	c := &cobra.Command{
		Use:   "create ZONE --ns NAME... [--record \"NAME TYPE VALUE\"]...",
		Short: "Create a DNS zone",
		Example: `  azgate dns zone create example.com --ns ns1.example.com --ns ns2.example.com \
      --record "ns1 A 192.0.2.53" --record "ns2 A 198.51.100.53" --record "@ MX 10 mail.example.com."`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			z := &model.DNSZone{Name: args[0], NS: ns, TTL: ttl, SOA: model.ZoneSOA{RName: rname, Serial: serial, Minimum: min}}
			for _, spec := range records {
				r, err := parseZoneRecord(spec, 0)
				if err != nil {
					return err
				}
				z.Records = append(z.Records, r)
			}
			if es := z.Validate(); len(es) > 0 {
				return fmt.Errorf("invalid DNS zone %q: %w", z.Name, es)
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			var res client.Result
			if replace {
				res, err = cl.Put(cmd.Context(), z)
			} else {
				res, err = cl.Create(cmd.Context(), z)
			}
			if err != nil {
				return err
			}
			return writeResult(cmd, "DNS zone "+z.Name, res, z)
		},
	}
	f := c.Flags()
	f.StringArrayVar(&ns, "ns", nil, "a name server of the zone (repeatable; the first is the SOA's primary)")
	f.StringArrayVar(&records, "record", nil, "a static record \"NAME TYPE VALUE\": NAME relative (www), @ or absolute with a dot; TYPE A, AAAA, CNAME, TXT or MX (repeatable)")
	f.Uint32Var(&ttl, "ttl", 0, "TTL of the SOA, NS and records without their own (default 3600)")
	f.StringVar(&rname, "rname", "", "the SOA's responsible mailbox as a name (default hostmaster.ZONE)")
	f.Uint32Var(&serial, "serial", 0, "the SOA serial (default 1)")
	f.Uint32Var(&min, "negative-ttl", 0, "the SOA minimum, the negative-caching TTL (default 300)")
	f.BoolVar(&replace, "replace", false, "replace the zone if it exists (PUT) instead of failing")
	c.MarkFlagRequired("ns")
	return c
}

func zoneSetCommand() *cobra.Command {
	var (
		ns                     []string
		ttl, serial, min       uint32
		rname, mname           string
		refresh, retry, expire uint32
	)
	c := &cobra.Command{
		Use:     "set ZONE [--ns NAME]... [--ttl N] [--serial N] [--rname NAME] [--mname NAME] [--negative-ttl N] [--refresh N] [--retry N] [--expire N]",
		Short:   "Change a zone's NS, TTL or SOA: only the flags given change (--ns replaces every name server)",
		Example: `  azgate dns zone set example.com --serial 2026120302 --ttl 600`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ch := cmd.Flags().Changed
			return editZone(cmd, args[0], func(z *model.DNSZone) (string, error) {
				var what []string
				set := func(flag string, f func()) {
					if ch(flag) {
						f()
						what = append(what, flag)
					}
				}
				set("ns", func() { z.NS = ns })
				set("ttl", func() { z.TTL = ttl })
				set("serial", func() { z.SOA.Serial = serial })
				set("rname", func() { z.SOA.RName = rname })
				set("mname", func() { z.SOA.MName = mname })
				set("negative-ttl", func() { z.SOA.Minimum = min })
				set("refresh", func() { z.SOA.Refresh = refresh })
				set("retry", func() { z.SOA.Retry = retry })
				set("expire", func() { z.SOA.Expire = expire })
				if len(what) == 0 {
					return "", fmt.Errorf("nothing to change: give at least one of --ns, --ttl, --serial, --rname, --mname, --negative-ttl, --refresh, --retry, --expire")
				}
				return strings.Join(what, ", ") + " set", nil
			})
		},
	}
	f := c.Flags()
	f.StringArrayVar(&ns, "ns", nil, "the zone's name servers (repeatable; replaces them all)")
	f.Uint32Var(&ttl, "ttl", 0, "TTL of the SOA, NS and records without their own")
	f.Uint32Var(&serial, "serial", 0, "the SOA serial")
	f.StringVar(&rname, "rname", "", "the SOA's responsible mailbox as a name")
	f.StringVar(&mname, "mname", "", "the SOA's primary name server")
	f.Uint32Var(&min, "negative-ttl", 0, "the SOA minimum (negative-caching TTL)")
	f.Uint32Var(&refresh, "refresh", 0, "the SOA refresh")
	f.Uint32Var(&retry, "retry", 0, "the SOA retry")
	f.Uint32Var(&expire, "expire", 0, "the SOA expire")
	return c
}

// editZone reads a zone, lets edit change it and writes it back unless
// someone changed it meanwhile (client.Edit: edit runs again on the new
// version).
func editZone(cmd *cobra.Command, name string, edit func(*model.DNSZone) (string, error)) error {
	cl, err := apiClient()
	if err != nil {
		return err
	}
	var what string
	res, o, err := cl.Edit(cmd.Context(), model.KindDNSZone, name, func(o model.Object) (err error) {
		what, err = edit(o.(*model.DNSZone))
		return err
	})
	if err != nil {
		return err
	}
	return writeResult(cmd, "DNS zone "+name+" ("+what+")", res, o)
}

func zoneAddRecordCommand() *cobra.Command {
	var ttl uint32
	c := &cobra.Command{
		Use:     "add-record ZONE NAME TYPE VALUE...",
		Short:   "Add a static record to a zone",
		Example: `  azgate dns zone add-record example.com @ MX 10 mail.example.com.`,
		Args:    cobra.MinimumNArgs(4),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := parseZoneRecord(strings.Join(args[1:], " "), ttl)
			if err != nil {
				return err
			}
			return editZone(cmd, args[0], func(z *model.DNSZone) (string, error) {
				z.Records = append(z.Records, r)
				return "added " + r.Name + " " + r.Type, nil
			})
		},
	}
	c.Flags().Uint32Var(&ttl, "ttl", 0, "the record's TTL (default: the zone's)")
	return c
}

func zoneRemoveRecordCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove-record ZONE NAME TYPE [VALUE...]",
		Short: "Remove a zone's static records of NAME and TYPE (only those with VALUE when given)",
		Args:  cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, typ, value := args[1], strings.ToUpper(args[2]), strings.Join(args[3:], " ")
			return editZone(cmd, args[0], func(z *model.DNSZone) (string, error) {
				var keep []model.ZoneRecord
				for _, r := range z.Records {
					if r.Name == name && r.Type == typ && (value == "" || r.Value == value) {
						continue
					}
					keep = append(keep, r)
				}
				n := len(z.Records) - len(keep)
				if n == 0 {
					if value != "" {
						return "", fmt.Errorf("zone %s has no %s record %q with value %q", z.Name, typ, name, value)
					}
					return "", fmt.Errorf("zone %s has no %s record %q", z.Name, typ, name)
				}
				z.Records = keep
				return fmt.Sprintf("removed %d %s record(s) of %s", n, typ, name), nil
			})
		},
	}
}

func describeZone(w io.Writer, o model.Object) {
	z := o.(*model.DNSZone)
	tw := newTable(w)
	row(tw, "zone:", z.Name)
	row(tw, "ns:", strings.Join(z.NS, ", "))
	row(tw, "ttl:", z.TTL)
	s := z.SOA
	row(tw, "soa:", fmt.Sprintf("%s %s serial %d refresh %d retry %d expire %d negative-ttl %d", s.MName, s.RName, s.Serial, s.Refresh, s.Retry, s.Expire, s.Minimum))
	tw.Flush()
	if len(z.Records) == 0 {
		fmt.Fprintln(w, "(no static records)")
		return
	}
	fmt.Fprintln(w)
	tw = newTable(w, "NAME", "TYPE", "TTL", "VALUE")
	for _, r := range z.Records {
		ttl := "zone"
		if r.TTL != 0 {
			ttl = strconv.Itoa(int(r.TTL))
		}
		row(tw, r.Name, r.Type, ttl, qualifiedValue(z.Name, r))
	}
	tw.Flush()
}

// qualifiedValue shows a record's data with the name it holds fully
// qualified: a name without the trailing dot is relative to the zone
// (web.example.com in zone example.com is web.example.com.example.com.),
// which is rarely what was meant, so it is shown qualified and marked.
func qualifiedValue(zone string, r model.ZoneRecord) string {
	switch strings.ToUpper(r.Type) {
	case "CNAME", "NS", "PTR", "MX", "SRV":
	default:
		return r.Value
	}
	f := strings.Fields(r.Value)
	if len(f) == 0 {
		return r.Value
	}
	last := f[len(f)-1]
	origin := strings.TrimSuffix(zone, ".") + "."
	switch {
	case last == "@":
		f[len(f)-1] = origin
	case !strings.HasSuffix(last, "."):
		f[len(f)-1] = last + "." + origin
		return strings.Join(f, " ") + fmt.Sprintf("  (written %q: no trailing dot, relative to the zone)", r.Value)
	}
	return strings.Join(f, " ")
}

func zoneTable(w io.Writer, objs []model.Object) {
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key() < objs[j].Key() })
	tw := newTable(w, "ZONE", "NS", "TTL", "SERIAL", "RECORDS")
	for _, o := range objs {
		z := o.(*model.DNSZone)
		row(tw, z.Name, strings.Join(z.NS, ","), z.TTL, z.SOA.Serial, len(z.Records))
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no DNS zones)")
	}
}
