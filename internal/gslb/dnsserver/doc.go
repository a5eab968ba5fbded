// Package dnsserver is the GSLB's authoritative DNS server: the Handler
// answers from an internal/gslb Catalog (swapped atomically with
// SetCatalog) with the catalog's policies, EDNS, Client Subnet (RFC 7871)
// and truncation; the Server runs it over a batched UDP loop with a
// wire-level fast path for plain GSLB queries and early rejects, and over
// TCP with connection limits. It is kept apart from the catalog so that
// what only checks or builds catalogs (internal/gslbplan, and through it
// the controller) does not link the server; TestLayers holds that.
package dnsserver
