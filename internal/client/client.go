// Package client is the Go client of the controller's REST API, used by
// the CLI and the lab.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// Client talks to one controller.
type Client struct {
	base  string // scheme://host, without a trailing slash
	token string
	hc    *http.Client
	err   error // a bad base URL, reported by every call
	// Force and DryRun go with every write (force=true, dryRun=true):
	// do what the controller's guards refuse; check, write nothing.
	Force, DryRun bool
	// TokenFrom says where the token was read from ("--token-file
	// /x"): a 401 answer's error names it (the controller does not know
	// it, and does not name any path of its own).
	TokenFrom string
}

// transports holds one transport per base URL, shared by the clients of
// a process: a process that makes clients one after another (the lab, the
// CLI's tests) would otherwise leave each one's kept-alive connections
// open until the controller's idle timeout, and the controller caps the
// connections of one source address (--max-conns-per-source).
var transports sync.Map // base URL -> *http.Transport

// New returns a client of the API at baseURL, http(s)://HOST:PORT or
// unix:///path/to/api.sock, authenticating with token.
func New(baseURL, token string) *Client {
	c := &Client{token: token}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		c.err = fmt.Errorf("API URL %q: %w", baseURL, err)
	case u.Scheme == "unix":
		if u.Path == "" {
			c.err = fmt.Errorf("API URL %q: want unix:///path/to/api.sock", baseURL)
		}
		path := u.Path
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		c.base = "http://unix"
	case u.Scheme == "http" || u.Scheme == "https":
		if u.Host == "" {
			c.err = fmt.Errorf("API URL %q: no host", baseURL)
		}
		c.base = u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")
	default:
		c.err = fmt.Errorf("API URL %q: want http://HOST:PORT, https://HOST:PORT or unix:///path", baseURL)
	}
	if c.err == nil {
		t, _ := transports.LoadOrStore(baseURL, tr)
		tr = t.(*http.Transport)
	}
	c.hc = &http.Client{Transport: tr}
	return c
}

// APIError is an error answered by the controller.
type APIError struct {
	Status  int
	Message string
	Fields  []model.FieldError
	// Force: the controller refused a change that needs force=true
	// (--force) and says what it would do.
	Force bool
	// Hint is the client's own advice (a 401: where it read its token).
	Hint string
}

// Error prints the message and, one per line, every field error the
// message does not already spell out.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	for _, f := range e.Fields {
		if !strings.Contains(e.Message, f.Error()) {
			b.WriteString("\n  ")
			b.WriteString(f.Error())
		}
	}
	if e.Hint != "" {
		b.WriteString("\n  ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

// IsNotFound reports whether err is the API's 404.
func IsNotFound(err error) bool {
	ae, ok := err.(*APIError)
	return ok && ae.Status == http.StatusNotFound
}

// do sends a request and decodes the JSON answer into out (if not nil).
// It returns the revision the answer reflects.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int64, error) {
	rev, _, err := c.doHeader(ctx, method, path, nil, in, out)
	return rev, err
}

// doHeader is do sending the headers hdr and returning the answer's.
func (c *Client) doHeader(ctx context.Context, method, path string, hdr http.Header, in, out any) (int64, http.Header, error) {
	if c.err != nil {
		return 0, nil, c.err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, fmt.Errorf("encoding the request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	if method != http.MethodGet && (c.Force || c.DryRun) {
		q := url.Values{}
		if c.Force {
			q.Set("force", "true")
		}
		if c.DryRun {
			q.Set("dryRun", "true")
		}
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		path += sep + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("controller API: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		err := readError(resp)
		if ae, ok := err.(*APIError); ok && resp.StatusCode == http.StatusUnauthorized && c.TokenFrom != "" {
			ae.Hint = "the token sent was read from " + c.TokenFrom +
				": point --token-file or $AZGATE_TOKEN_FILE at the token file of this controller (DATA_DIR/token)"
		}
		return 0, resp.Header, err
	}
	rev, _ := strconv.ParseInt(resp.Header.Get(api.RevisionHeader), 10, 64)
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return 0, resp.Header, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return rev, resp.Header, nil
}

func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	var e api.Error
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		ae := &APIError{Status: resp.StatusCode, Message: e.Error, Fields: e.Fields, Force: e.Force}
		if resp.StatusCode == http.StatusPreconditionFailed {
			return &PreconditionFailed{APIError: ae, Current: e.Revision}
		}
		return ae
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &APIError{Status: resp.StatusCode, Message: fmt.Sprintf("%s (HTTP %d)", msg, resp.StatusCode)}
}

// Result says what a write did.
type Result struct {
	Revision int64  // store revision after the write
	Action   string // created, updated, unchanged or deleted
	// Object is the object as stored (JSON; empty after a delete).
	Object json.RawMessage
	// ETag is the object's revision after the write (PutIf, DeleteIf
	// and Edit set it; 0 after a delete).
	ETag int64
	// Warnings are the controller's about the change; DryRun says
	// nothing was written (Client.DryRun).
	Warnings []string
	DryRun   bool
	// Refusals: a dry run's guard refusals (the write would need force).
	Refusals []string
}

func (c *Client) write(ctx context.Context, method, path string, in any) (Result, error) {
	var w api.Write
	if _, err := c.do(ctx, method, path, in, &w); err != nil {
		return Result{}, err
	}
	return Result{Revision: w.Revision, Action: w.Action, Object: w.Object, Warnings: w.Warnings, DryRun: w.DryRun, Refusals: w.Refusals}, nil
}

func objectPath(kind, key string) string { return "/v1/" + kind + "/" + url.PathEscape(key) }

// list decodes GET /v1/KIND into items (a pointer to a slice), following
// the continue tokens of the controller's pages (each page is at the
// revision of its answer; the last one's is returned).
func (c *Client) list(ctx context.Context, kind string, items any) (int64, error) {
	var all []json.RawMessage
	var rev int64
	cont := ""
	for {
		path := "/v1/" + kind
		if cont != "" {
			path += "?continue=" + url.QueryEscape(cont)
		}
		var l api.List
		if _, err := c.do(ctx, http.MethodGet, path, nil, &l); err != nil {
			return 0, err
		}
		var page []json.RawMessage
		if err := json.Unmarshal(l.Items, &page); err != nil {
			return 0, fmt.Errorf("decoding the %s: %w", kind, err)
		}
		all, rev = append(all, page...), l.Revision
		if l.Continue == "" || l.Continue == cont {
			break
		}
		cont = l.Continue
	}
	if all == nil {
		all = []json.RawMessage{}
	}
	b, _ := json.Marshal(all)
	if err := json.Unmarshal(b, items); err != nil {
		return 0, fmt.Errorf("decoding the %s: %w", kind, err)
	}
	return rev, nil
}

// List returns every object of a kind, ordered by key, following the
// controller's pages.
func (c *Client) List(ctx context.Context, kind string) ([]model.Object, error) {
	return c.ListAll(ctx, kind, ListQuery{})
}

// ListAll is ListPage from q.Continue to the end: every page the
// controller cuts the list into (docs/api.md, Paging), one request each.
func (c *Client) ListAll(ctx context.Context, kind string, q ListQuery) ([]model.Object, error) {
	q.Limit = 0
	var all []model.Object
	for {
		objs, next, err := c.ListPage(ctx, kind, q)
		if err != nil {
			return nil, err
		}
		all = append(all, objs...)
		if next == "" || next == q.Continue {
			return all, nil
		}
		q.Continue = next
	}
}

// Get returns one object.
func (c *Client) Get(ctx context.Context, kind, key string) (model.Object, error) {
	o, err := model.New(kind)
	if err != nil {
		return nil, err
	}
	if _, err := c.do(ctx, http.MethodGet, objectPath(kind, key), nil, o); err != nil {
		return nil, err
	}
	return o, nil
}

// Create stores a new object; it fails with 409 if one with the same key exists.
func (c *Client) Create(ctx context.Context, o model.Object) (Result, error) {
	return c.write(ctx, http.MethodPost, "/v1/"+model.KindOf(o), o)
}

// Put creates or replaces an object.
func (c *Client) Put(ctx context.Context, o model.Object) (Result, error) {
	return c.write(ctx, http.MethodPut, objectPath(model.KindOf(o), o.Key()), o)
}

// Delete removes an object.
func (c *Client) Delete(ctx context.Context, kind, key string) (Result, error) {
	return c.write(ctx, http.MethodDelete, objectPath(kind, key), nil)
}

// AZs lists the AZs.
func (c *Client) AZs(ctx context.Context) ([]model.AZ, error) {
	var l []model.AZ
	_, err := c.list(ctx, model.KindAZ, &l)
	return l, err
}

// Hosts lists the hosts.
func (c *Client) Hosts(ctx context.Context) ([]model.Host, error) {
	var l []model.Host
	_, err := c.list(ctx, model.KindHost, &l)
	return l, err
}

// EdgeSets lists the edge sets.
func (c *Client) EdgeSets(ctx context.Context) ([]model.EdgeSet, error) {
	var l []model.EdgeSet
	_, err := c.list(ctx, model.KindEdgeSet, &l)
	return l, err
}

// EIPs lists the EIPs in address order.
func (c *Client) EIPs(ctx context.Context) ([]model.EIP, error) {
	var l []model.EIP
	_, err := c.list(ctx, model.KindEIP, &l)
	return l, err
}

// GetEIP returns one EIP.
func (c *Client) GetEIP(ctx context.Context, addr string) (*model.EIP, error) {
	var e model.EIP
	if _, err := c.do(ctx, http.MethodGet, objectPath(model.KindEIP, addr), nil, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// BindEIP binds an EIP to a guest of a host (moving it if it was bound
// elsewhere).
func (c *Client) BindEIP(ctx context.Context, addr, host, guest string) (Result, error) {
	return c.write(ctx, http.MethodPost, objectPath(model.KindEIP, addr)+"/bind", api.Bind{Host: host, Guest: guest})
}

// UnbindEIP removes an EIP's binding.
func (c *Client) UnbindEIP(ctx context.Context, addr string) (Result, error) {
	return c.write(ctx, http.MethodPost, objectPath(model.KindEIP, addr)+"/unbind", nil)
}

// AddGuest adds a guest to a host.
func (c *Client) AddGuest(ctx context.Context, host string, g model.Guest) (Result, error) {
	return c.write(ctx, http.MethodPost, objectPath(model.KindHost, host)+"/guests", g)
}

// RemoveGuest removes a guest (not bound to an EIP) from a host.
func (c *Client) RemoveGuest(ctx context.Context, host, guest string) (Result, error) {
	return c.write(ctx, http.MethodDelete, objectPath(model.KindHost, host)+"/guests/"+url.PathEscape(guest), nil)
}

// ApplyResult says what an apply did to each object.
type ApplyResult = api.ApplyResult

// Apply stores a whole document (all or nothing).
func (c *Client) Apply(ctx context.Context, doc *model.Document) (ApplyResult, error) {
	return c.ApplyWith(ctx, doc, ApplyOptions{})
}

// ApplyOptions: Prune deletes the stored objects of the kinds the
// document names (its lists, even empty) that it does not hold; Diff
// lists the changed fields of updated objects.
type ApplyOptions struct{ Prune, Diff bool }

// ApplyWith stores a whole document with options.
func (c *Client) ApplyWith(ctx context.Context, doc *model.Document, o ApplyOptions) (ApplyResult, error) {
	// The document's empty lists name their kinds (for prune): sent as
	// [] where encoding would leave them out.
	b, err := json.Marshal(doc)
	if err != nil {
		return ApplyResult{}, fmt.Errorf("encoding the document: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return ApplyResult{}, fmt.Errorf("encoding the document: %w", err)
	}
	for _, k := range doc.Named() {
		if _, ok := m[k]; !ok {
			m[k] = json.RawMessage("[]")
		}
	}
	q := url.Values{}
	if o.Prune {
		q.Set("prune", "true")
	}
	if o.Diff {
		q.Set("diff", "true")
	}
	path := "/v1/apply"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var res ApplyResult
	_, err = c.do(ctx, http.MethodPost, path, m, &res)
	return res, err
}

// ListQuery pages and filters a list: Limit (0: all), Continue (the key
// a page ended with) and, for EIPs, Set, Host and Prefix.
type ListQuery struct {
	Limit             int
	Continue          string
	Set, Host, Prefix string
}

// ListPage lists objects of kind by q; next is the key to continue after
// ("" on the last page).
func (c *Client) ListPage(ctx context.Context, kind string, q ListQuery) (objs []model.Object, next string, err error) {
	if _, err := model.New(kind); err != nil {
		return nil, "", err
	}
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	for k, s := range map[string]string{"continue": q.Continue, "set": q.Set, "host": q.Host, "prefix": q.Prefix} {
		if s != "" {
			v.Set(k, s)
		}
	}
	path := "/v1/" + kind
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var l api.List
	if _, err := c.do(ctx, http.MethodGet, path, nil, &l); err != nil {
		return nil, "", err
	}
	objs, err = model.DecodeList(kind, l.Items)
	return objs, l.Continue, err
}

// DeleteEIPs deletes every EIP the selector picks (set, host, prefix:
// at least one), all or nothing.
func (c *Client) DeleteEIPs(ctx context.Context, set, host, prefix string) (ApplyResult, error) {
	sel := map[string]string{}
	for k, s := range map[string]string{"set": set, "host": host, "prefix": prefix} {
		if s != "" {
			sel[k] = s
		}
	}
	var res ApplyResult
	_, err := c.do(ctx, http.MethodPost, "/v1/eips/delete", sel, &res)
	return res, err
}

// Status is the controller's and the nodes' status.
type Status = api.Status

// Status returns the controller's summary and every node's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	if _, err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Export reads every object the users write as one document, at one
// store revision (GET /v1/export), and that revision.
func (c *Client) Export(ctx context.Context) (*model.Document, int64, error) {
	var out struct {
		Revision int64           `json:"revision"`
		Document *model.Document `json:"document"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/export", nil, &out); err != nil {
		return nil, 0, err
	}
	if out.Document == nil {
		out.Document = &model.Document{}
	}
	return out.Document, out.Revision, nil
}

// DDoSEvents reads the DDoS detection's decisions after sequence number
// since (0: all it keeps).
func (c *Client) DDoSEvents(ctx context.Context, since uint64) (*api.DDoSEvents, error) {
	var ev api.DDoSEvents
	if _, err := c.do(ctx, http.MethodGet, "/v1/ddos/events?since="+strconv.FormatUint(since, 10), nil, &ev); err != nil {
		return nil, err
	}
	return &ev, nil
}

// DDoSRates reads the per-address rates the edges report, summed, the top
// n by packet rate.
func (c *Client) DDoSRates(ctx context.Context, n int) (*api.DDoSRates, error) {
	var r api.DDoSRates
	if _, err := c.do(ctx, http.MethodGet, "/v1/ddos/rates?top="+strconv.Itoa(n), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Audit reads a page of the audit log (admin tokens only), newest first:
// at most limit records (0: the controller's default) older than the
// continue value cont ("" : from the newest).
func (c *Client) Audit(ctx context.Context, limit int, cont string) (*api.AuditPage, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cont != "" {
		q.Set("continue", cont)
	}
	path := "/v1/audit"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p api.AuditPage
	if _, err := c.do(ctx, http.MethodGet, path, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
