// e2e-loadgen: closed-loop load generator for substatusd's end-to-end benchmarks (make bench).
//
// It speaks gRPC with grpc-go (Debian's 1.33, the same stack as ../shared/peer-bench's load
// generator), with a pass-through codec: requests are encoded and responses checked by the small
// protobuf wire helpers below, from the field numbers of Protos/substatus/v1, so no generated
// stubs are needed. HTTP/1.1 loads use net/http.
//
// Modes (-mode):
//
//	elig    CheckEligibility, -users U users x -products P products per call, random users of
//	        random apps (or the users of -userfile for -app; or only -hot-users of them)
//	ingest  ImportTransactions, one new user with -batch transactions and a renewal info per call
//	notify  App Store Server Notifications V1 (DID_RENEW) POSTed to /v1/apps/{app}/apple/notifications
//	submit  SubmitReceipt once for each user of -userfile (setup of the verifyReceipt comparison)
//	naive   what a backend without substatus does per check: verifyReceipt at -verify-url, then
//	        evaluate the 20 products' intro eligibility locally from the JSON
//	seed, status  (seed.go) the data of `make bench COMPARE=<ref>` through the API, and GetStatus
//	receive a webhook receiver (net/http, answering 204 at once): checks each POST's
//	        Substatus-Signature against -secret, that Substatus-Event-Id is the body's eventId,
//	        counts distinct Substatus-Event-Id values, and
//	        exits once -expect distinct events arrived (its address is written to -addr-file)
//
// The last output line is `RESULT {json}`: calls, calls/s, latency percentiles (µs), errors,
// and the server's CPU seconds and RSS (from /proc/PID) when -server-pid is given.
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/ioutil"
	"math"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

var (
	mode       = flag.String("mode", "elig", "elig | ingest | notify | submit | naive | seed | status | receive")
	calls      = flag.Int64("calls", 0, "ingest: make exactly this many calls, then stop (no warm-up); 0: -duration")
	secretFile = flag.String("secret-file", "", "receive: a file holding the webhook's signing secret (read at the first POST)")
	addrFile   = flag.String("addr-file", "", "receive: where to write the receiver's host:port")
	addr       = flag.String("addr", "", "substatusd gRPC host:port")
	httpAddr   = flag.String("http", "", "substatusd HTTP host:port (notify)")
	specPath   = flag.String("spec", "", "bench.json written by substatus-e2e-datagen")
	conns      = flag.Int("conns", 4, "HTTP/2 connections")
	conc       = flag.Int("concurrency", 64, "calls in flight")
	warmup     = flag.Duration("warmup", 2*time.Second, "warm-up (not measured)")
	duration   = flag.Duration("duration", 10*time.Second, "measured time")
	users      = flag.Int("users", 1, "users per CheckEligibility call")
	hotUsers   = flag.Int("hot-users", 0, "elig: draw users only from this many (the first of each app's list, spread evenly over the apps): a load with locality; 0 draws from all")
	products   = flag.Int("products", 20, "products per user per CheckEligibility call")
	batch      = flag.Int("batch", 10, "transactions per ImportTransactions call")
	appFlag    = flag.String("app", "", "only this app (elig with -userfile, submit, naive)")
	userFile   = flag.String("userfile", "", "JSON lines {user_id, receipt} (submit, naive, elig)")
	verifyURL  = flag.String("verify-url", "", "verifyReceipt URL (naive)")
	srvPid     = flag.Int("server-pid", 0, "report this process's CPU and RSS")
	timeout    = flag.Duration("timeout", 20*time.Second, "per-call deadline")
	protocol   = flag.String("protocol", "grpc",
		"elig: grpc (grpc-go) | connect-proto | connect-json | grpc-web (HTTP/2 cleartext to -addr) | "+
			"connect-json-h1 | connect-proto-h1 | grpc-web-h1 (HTTP/1.1 to -http)")
)

// MARK: protobuf wire helpers

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendTag(b []byte, field, wireType int) []byte {
	return appendVarint(b, uint64(field<<3|wireType))
}

func appendString(b []byte, field int, s string) []byte {
	if s == "" {
		return b
	}
	b = appendTag(b, field, 2)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendMessage(b []byte, field int, m []byte) []byte {
	b = appendTag(b, field, 2)
	b = appendVarint(b, uint64(len(m)))
	return append(b, m...)
}

func appendInt(b []byte, field int, v int64) []byte {
	if v == 0 {
		return b
	}
	b = appendTag(b, field, 0)
	return appendVarint(b, uint64(v))
}

func appendBool(b []byte, field int, v bool) []byte {
	if !v {
		return b
	}
	return appendInt(b, field, 1)
}

// fields calls fn for each top-level field of a message; varints as v, length-delimited as data.
func fields(m []byte, fn func(field int, v uint64, data []byte)) error {
	for len(m) > 0 {
		key, n := readVarint(m)
		if n == 0 {
			return errors.New("bad tag")
		}
		m = m[n:]
		switch key & 7 {
		case 0:
			v, n := readVarint(m)
			if n == 0 {
				return errors.New("bad varint")
			}
			m = m[n:]
			fn(int(key>>3), v, nil)
		case 2:
			l, n := readVarint(m)
			if n == 0 || uint64(len(m)-n) < l {
				return errors.New("bad length")
			}
			fn(int(key>>3), 0, m[n:n+int(l)])
			m = m[n+int(l):]
		case 1:
			if len(m) < 8 {
				return errors.New("short fixed64")
			}
			m = m[8:]
		case 5:
			if len(m) < 4 {
				return errors.New("short fixed32")
			}
			m = m[4:]
		default:
			return fmt.Errorf("wire type %d", key&7)
		}
	}
	return nil
}

func readVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * uint(i))
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

// rawCodec passes already-encoded messages through grpc-go.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// MARK: the data set

type specProduct struct {
	ProductID string `json:"product_id"`
	Type      string `json:"type"`
	Group     string `json:"subscription_group_id"`
	Intro     bool   `json:"intro"`
}

type specApp struct {
	AppID        string        `json:"app_id"`
	BundleID     string        `json:"bundle_id"`
	SharedSecret string        `json:"shared_secret"`
	Products     []specProduct `json:"products"`
}

type specChain struct {
	AppID   string `json:"app_id"`
	UserID  string `json:"user_id"`
	OTID    string `json:"original_transaction_id"`
	Product string `json:"product_id"`
	Group   string `json:"subscription_group_id"`
	Expires int64  `json:"expires_ms"`
}

type spec struct {
	Users   int               `json:"users"`
	UserIDs string            `json:"user_ids"` // a file beside the spec: one user id per line, in index order
	Apps    int               `json:"apps"`
	AsOfMs  int64             `json:"as_of_ms"`
	Keys    map[string]string `json:"keys"`
	Detail  []specApp         `json:"apps_detail"`
	Chains  []specChain       `json:"chains"`
}

type fileUser struct {
	UserID  string `json:"user_id"`
	Receipt string `json:"receipt"`
}

// userIDs reads the generator's user ids (users.txt beside the spec), index i at position i.
func (s *spec) userIDs() []string {
	if s.UserIDs == "" {
		fail("the spec names no user_ids file: regenerate the data (substatus-e2e-data)")
	}
	b, err := ioutil.ReadFile(filepath.Join(filepath.Dir(*specPath), s.UserIDs))
	if err != nil {
		fail("read the user ids: %v", err)
	}
	ids := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(ids) != s.Users {
		fail("%s has %d user ids, the spec says %d users", s.UserIDs, len(ids), s.Users)
	}
	return ids
}

func loadSpec() *spec {
	b, err := ioutil.ReadFile(*specPath)
	if err != nil {
		fail("read -spec: %v", err)
	}
	var s spec
	if err := json.Unmarshal(b, &s); err != nil {
		fail("parse -spec: %v", err)
	}
	return &s
}

func loadUsers() []fileUser {
	b, err := ioutil.ReadFile(*userFile)
	if err != nil {
		fail("read -userfile: %v", err)
	}
	var out []fileUser
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var u fileUser
		if err := json.Unmarshal([]byte(line), &u); err != nil {
			fail("parse -userfile: %v", err)
		}
		out = append(out, u)
	}
	return out
}

func (s *spec) app(id string) *specApp {
	for i := range s.Detail {
		if s.Detail[i].AppID == id {
			return &s.Detail[i]
		}
	}
	fail("no app %q in the spec", id)
	return nil
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "e2e-loadgen: "+format+"\n", a...)
	os.Exit(2)
}

// MARK: measurement

// a call: returns an error for a failed call or a wrong answer.
type callFunc func(worker int, rng *rand.Rand) error

type result struct {
	calls, errors  int64
	secs           float64
	lat            []int64
	firstError     string
	srvCPU         float64
	rssKiB, hwmKiB int64
	cliCPU         float64
}

func procCPU(pid string) float64 {
	b, err := ioutil.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return math.NaN()
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

func procKiB(pid int, key string) int64 {
	b, err := ioutil.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, key) {
			f := strings.Fields(line)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// run drives `call` with -concurrency workers: -warmup, then -duration measured (or, with
// total > 0, exactly `total` calls, all measured).
func run(call callFunc, total int64) result {
	const (
		warm = iota
		measure
		stop
	)
	var phase int32 = warm
	if total > 0 {
		phase = measure
	}
	var issued, errs int64
	var firstErr atomic.Value
	var stopAt int64
	lats := make([][]int64, *conc)
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)*7919 + time.Now().UnixNano()))
			my := make([]int64, 0, 1<<15)
			for {
				ph := atomic.LoadInt32(&phase)
				if ph == stop {
					break
				}
				if total > 0 && atomic.AddInt64(&issued, 1) > total {
					break
				}
				t0 := time.Now()
				err := call(w, rng)
				t1 := time.Now()
				if ph != measure {
					continue
				}
				if sa := atomic.LoadInt64(&stopAt); sa != 0 && t1.UnixNano() > sa {
					continue
				}
				if err != nil {
					if atomic.AddInt64(&errs, 1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				my = append(my, t1.Sub(t0).Nanoseconds())
			}
			lats[w] = my
		}(w)
	}
	if total == 0 {
		time.Sleep(*warmup)
	}
	pid := strconv.Itoa(*srvPid)
	var srv0 float64
	if *srvPid > 0 {
		srv0 = procCPU(pid)
	}
	cli0 := procCPU("self")
	start := time.Now()
	atomic.StoreInt32(&phase, measure)
	var end time.Time
	if total > 0 {
		wg.Wait()
		end = time.Now()
	} else {
		time.Sleep(*duration)
		end = time.Now()
		atomic.StoreInt64(&stopAt, end.UnixNano())
	}
	var r result
	if *srvPid > 0 {
		r.srvCPU = procCPU(pid) - srv0
	}
	r.cliCPU = procCPU("self") - cli0
	atomic.StoreInt32(&phase, stop)
	wg.Wait()
	for _, l := range lats {
		r.lat = append(r.lat, l...)
	}
	sort.Slice(r.lat, func(a, b int) bool { return r.lat[a] < r.lat[b] })
	r.calls = int64(len(r.lat))
	r.errors = errs
	if e, ok := firstErr.Load().(string); ok {
		r.firstError = e
	}
	r.secs = end.Sub(start).Seconds()
	if *srvPid > 0 {
		r.rssKiB = procKiB(*srvPid, "VmRSS:")
		r.hwmKiB = procKiB(*srvPid, "VmHWM:")
	}
	return r
}

func pct(s []int64, p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return float64(s[i]) / 1e3
}

func report(r result, itemsPerCall float64, extra map[string]interface{}) {
	out := map[string]interface{}{
		"mode": *mode, "calls": r.calls, "errors": r.errors, "secs": r.secs,
		"calls_per_s": float64(r.calls) / r.secs, "items_per_s": float64(r.calls) * itemsPerCall / r.secs,
		"p50_us": pct(r.lat, 50), "p90_us": pct(r.lat, 90), "p99_us": pct(r.lat, 99), "p999_us": pct(r.lat, 99.9),
		"concurrency": *conc, "cli_cores": r.cliCPU / r.secs,
	}
	if *srvPid > 0 {
		out["srv_cpu_s"] = r.srvCPU
		out["srv_cores"] = r.srvCPU / r.secs
		out["calls_per_srv_cpu_s"] = float64(r.calls) / r.srvCPU
		out["rss_mb"] = float64(r.rssKiB) / 1024
		out["peak_rss_mb"] = float64(r.hwmKiB) / 1024
	}
	if r.firstError != "" {
		out["first_error"] = r.firstError
	}
	for k, v := range extra {
		out[k] = v
	}
	for k, v := range out {
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			out[k] = nil
		}
	}
	b, _ := json.Marshal(out)
	fmt.Printf("%s %s: %d calls in %.2f s = %.0f calls/s, p50 %.0f µs, p99 %.0f µs, p99.9 %.0f µs, errors %d\n",
		*mode, *appFlag, r.calls, r.secs, float64(r.calls)/r.secs, pct(r.lat, 50), pct(r.lat, 99), pct(r.lat, 99.9), r.errors)
	fmt.Printf("RESULT %s\n", b)
}

// MARK: gRPC

type grpcClient struct {
	conns []*grpc.ClientConn
	ctx   context.Context
}

func dial(key string) *grpcClient {
	c := &grpcClient{ctx: metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+key))}
	for i := 0; i < *conns; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cc, err := grpc.DialContext(ctx, *addr, grpc.WithInsecure(), grpc.WithBlock(),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(64<<20)))
		cancel()
		if err != nil {
			fail("dial %s: %v", *addr, err)
		}
		c.conns = append(c.conns, cc)
	}
	return c
}

func (c *grpcClient) invoke(worker int, method string, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(c.ctx, *timeout)
	defer cancel()
	var resp []byte
	err := c.conns[worker%len(c.conns)].Invoke(ctx, method, &req, &resp)
	return resp, err
}

// MARK: Connect and gRPC-Web (net/http; HTTP/2 cleartext with prior knowledge, or HTTP/1.1)

type webClient struct {
	client  *http.Client
	url     string
	key     string
	ctype   string
	json    bool
	grpcWeb bool
	connect bool
}

func newWebClient(p, key string) *webClient {
	w := &webClient{key: key}
	h1 := strings.HasSuffix(p, "-h1")
	switch strings.TrimSuffix(p, "-h1") {
	case "connect-proto":
		w.ctype, w.connect = "application/proto", true
	case "connect-json":
		w.ctype, w.connect, w.json = "application/json", true, true
	case "grpc-web":
		w.ctype, w.grpcWeb = "application/grpc-web+proto", true
	default:
		fail("unknown -protocol %q", p)
	}
	host := *addr
	if h1 {
		host = *httpAddr
		w.client = &http.Client{Timeout: *timeout, Transport: &http.Transport{
			MaxIdleConns: *conc * 2, MaxIdleConnsPerHost: *conc * 2, MaxConnsPerHost: *conc,
			IdleConnTimeout: time.Minute, DisableCompression: true}}
	} else {
		w.client = &http.Client{Timeout: *timeout, Transport: &http2.Transport{
			AllowHTTP: true, DisableCompression: true,
			DialTLSContext: func(ctx context.Context, network, a string, _ *tls.Config) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, a)
			}}}
	}
	if host == "" {
		fail("-protocol %s needs %s", p, map[bool]string{true: "-http", false: "-addr"}[h1])
	}
	w.url = "http://" + host + "/substatus.v1.EligibilityService/CheckEligibility"
	return w
}

// jsonRequest is the proto3 JSON form of the binary CheckEligibilityRequest `req`.
func jsonRequest(req []byte, appID string, asOf int64) []byte {
	type query struct {
		UserID     string   `json:"userId"`
		ProductIDs []string `json:"productIds"`
	}
	var queries []query
	fields(req, func(f int, _ uint64, data []byte) {
		if f != 2 {
			return
		}
		var q query
		fields(data, func(f int, _ uint64, d []byte) {
			if f == 1 {
				q.UserID = string(d)
			} else if f == 2 {
				q.ProductIDs = append(q.ProductIDs, string(d))
			}
		})
		queries = append(queries, q)
	})
	m := map[string]interface{}{"appId": appID, "queries": queries}
	if asOf != 0 {
		m["asOfMs"] = strconv.FormatInt(asOf, 10)
	}
	b, _ := json.Marshal(m)
	return b
}

func (w *webClient) checkEligibility(_ int, req []byte, appID string, asOf int64) ([]byte, error) {
	body := req
	if w.json {
		body = jsonRequest(req, appID, asOf)
	} else if w.grpcWeb {
		framed := make([]byte, 5, 5+len(req))
		binary.BigEndian.PutUint32(framed[1:], uint32(len(req)))
		body = append(framed, req...)
	}
	hr, _ := http.NewRequest("POST", w.url, bytes.NewReader(body))
	hr.Header.Set("Content-Type", w.ctype)
	hr.Header.Set("Authorization", "Bearer "+w.key)
	if w.connect {
		hr.Header.Set("Connect-Protocol-Version", "1")
		hr.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(timeout.Milliseconds(), 10))
	} else {
		hr.Header.Set("X-Grpc-Web", "1")
	}
	resp, err := w.client.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := ioutil.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	if !w.grpcWeb {
		return b, nil
	}
	// gRPC-Web: data frames, then the trailer frame (flag 0x80) with grpc-status.
	var message []byte
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			return nil, errors.New("grpc-web: truncated frame")
		}
		if b[0]&0x80 != 0 {
			trailers := string(b[5 : 5+n])
			if !strings.Contains(trailers, "grpc-status:0") && !strings.Contains(trailers, "grpc-status: 0") {
				return nil, fmt.Errorf("grpc-web: %s", strings.TrimSpace(trailers))
			}
			return message, nil
		}
		message = append(message, b[5:5+n]...)
		b = b[5+n:]
	}
	return nil, errors.New("grpc-web: no trailer frame")
}

// max1 is n, at least 1.
func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

// checkJSONAnswer counts the users and products of a JSON CheckEligibilityResponse.
func checkJSONAnswer(b []byte) error {
	var r struct {
		Users []struct {
			Products []json.RawMessage `json:"products"`
		} `json:"users"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("bad JSON answer: %v", err)
	}
	answers := 0
	for _, u := range r.Users {
		answers += len(u.Products)
	}
	if len(r.Users) != *users || answers != *users**products {
		return fmt.Errorf("bad answer: %d users, %d products", len(r.Users), answers)
	}
	return nil
}

// MARK: modes

func eligibility(s *spec) {
	var c *grpcClient
	var web *webClient
	if *protocol == "grpc" {
		c = dial(s.Keys["read"])
	} else {
		web = newWebClient(*protocol, s.Keys["read"])
	}
	type appUsers struct {
		app      *specApp
		userIDs  []string
		products []string
	}
	var apps []appUsers
	if *userFile != "" {
		a := s.app(*appFlag)
		au := appUsers{app: a}
		for _, u := range loadUsers() {
			au.userIDs = append(au.userIDs, u.UserID)
		}
		apps = append(apps, au)
	} else {
		ids := s.userIDs()
		for a := 0; a < s.Apps; a++ {
			au := appUsers{app: &s.Detail[a]}
			perApp := s.Users / s.Apps
			if *hotUsers > 0 && *hotUsers/s.Apps < perApp {
				perApp = max1(*hotUsers / s.Apps)
			}
			for j := 0; j < perApp; j++ {
				au.userIDs = append(au.userIDs, ids[j*s.Apps+a])
			}
			apps = append(apps, au)
		}
	}
	for i := range apps {
		for _, p := range apps[i].app.Products {
			apps[i].products = append(apps[i].products, p.ProductID)
		}
		if *products > len(apps[i].products) {
			fail("-products %d: the catalog has %d", *products, len(apps[i].products))
		}
	}
	call := func(w int, rng *rand.Rand) error {
		a := &apps[rng.Intn(len(apps))]
		req := appendString(nil, 1, a.app.AppID)
		if !*atNow {
			req = appendInt(req, 3, s.AsOfMs)
		}
		first := rng.Intn(len(a.products))
		for u := 0; u < *users; u++ {
			q := appendString(nil, 1, a.userIDs[rng.Intn(len(a.userIDs))])
			for p := 0; p < *products; p++ {
				q = appendString(q, 2, a.products[(first+p)%len(a.products)])
			}
			req = appendMessage(req, 2, q)
		}
		var resp []byte
		var err error
		if web != nil {
			asOf := s.AsOfMs
			if *atNow {
				asOf = 0
			}
			resp, err = web.checkEligibility(w, req, a.app.AppID, asOf)
		} else {
			resp, err = c.invoke(w, "/substatus.v1.EligibilityService/CheckEligibility", req)
		}
		if err != nil {
			return err
		}
		if web != nil && web.json {
			return checkJSONAnswer(resp)
		}
		answered, answers := 0, 0
		err = fields(resp, func(f int, _ uint64, data []byte) {
			if f != 1 {
				return
			}
			answered++
			fields(data, func(f int, _ uint64, _ []byte) {
				if f == 2 {
					answers++
				}
			})
		})
		if err != nil || answered != *users || answers != *users**products {
			return fmt.Errorf("bad answer: %d users, %d products (err %v)", answered, answers, err)
		}
		return nil
	}
	r := run(call, 0)
	report(r, float64(*users**products), map[string]interface{}{"users": *users, "products": *products, "protocol": *protocol, "hot_users": *hotUsers})
}

func ingest(s *spec) {
	c := dial(s.Keys["ingest"])
	runID := time.Now().UnixNano() / 1e6 % 1e9
	var seq int64
	apps := s.Detail[:s.Apps]
	call := func(w int, rng *rand.Rand) error {
		n := atomic.AddInt64(&seq, 1)
		a := &apps[rng.Intn(len(apps))]
		g := rng.Intn(4)
		var p *specProduct
		for i := range a.Products {
			if a.Products[i].Group != "" && strings.HasSuffix(a.Products[i].ProductID, fmt.Sprintf(".g%d.monthly", g)) {
				p = &a.Products[i]
			}
		}
		base := s.AsOfMs - int64(*batch)*30*86400000
		otid := fmt.Sprintf("9%09d%09d", runID, n*1000)
		req := appendString(nil, 1, a.AppID)
		// A new user per call, with a version-4 UUID as apps send (unique: the run and the call's number).
		req = appendString(req, 2, fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", runID&0xffffffff, rng.Intn(1<<16), rng.Intn(1<<12), rng.Intn(1<<12), n))
		for k := 0; k < *batch; k++ {
			at := base + int64(k)*30*86400000
			t := appendString(nil, 1, fmt.Sprintf("9%09d%09d", runID, n*1000+int64(k)))
			t = appendString(t, 2, otid)
			t = appendString(t, 3, p.ProductID)
			t = appendString(t, 4, p.Group)
			t = appendInt(t, 5, at)
			t = appendInt(t, 6, base)
			t = appendInt(t, 7, at+30*86400000)
			t = appendBool(t, 8, k == 0)
			t = appendInt(t, 15, 1) // PURCHASED
			t = appendInt(t, 17, 1) // PRODUCTION
			t = appendString(t, 18, fmt.Sprintf("8%09d%09d", runID, n*1000+int64(k)))
			t = appendInt(t, 19, 1)
			t = appendInt(t, 20, 1) // AUTO_RENEWABLE
			t = appendInt(t, 23, at)
			req = appendMessage(req, 3, t)
		}
		ri := appendString(nil, 1, otid)
		ri = appendString(ri, 2, p.ProductID)
		ri = appendString(ri, 3, p.ProductID)
		ri = appendBool(ri, 4, true)
		ri = appendInt(ri, 8, 1)
		ri = appendInt(ri, 9, s.AsOfMs)
		req = appendMessage(req, 4, ri)
		resp, err := c.invoke(w, "/substatus.v1.IngestService/ImportTransactions", req)
		if err != nil {
			return err
		}
		created := 0
		fields(resp, func(f int, _ uint64, data []byte) {
			if f == 1 {
				fields(data, func(f int, v uint64, _ []byte) {
					if f == 2 && v == 1 {
						created++
					}
				})
			}
		})
		if created != *batch {
			return fmt.Errorf("%d of %d transactions created", created, *batch)
		}
		return nil
	}
	r := run(call, *calls)
	report(r, float64(*batch), map[string]interface{}{"batch": *batch})
}

func httpClient() *http.Client {
	return &http.Client{
		Timeout: *timeout,
		Transport: &http.Transport{
			MaxIdleConns: *conc * 2, MaxIdleConnsPerHost: *conc * 2, IdleConnTimeout: time.Minute,
			DisableCompression: true,
		},
	}
}

func post(client *http.Client, url string, body []byte) ([]byte, int, error) {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := ioutil.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}

func msDate(ms int64) string {
	return time.Unix(ms/1000, 0).UTC().Format("2006-01-02 15:04:05") + " Etc/GMT"
}

func notify(s *spec) {
	client := httpClient()
	if len(s.Chains) == 0 {
		fail("the spec has no subscriptions to renew")
	}
	runID := time.Now().UnixNano() / 1e6 % 1e9
	var seq int64
	call := func(w int, rng *rand.Rand) error {
		n := atomic.AddInt64(&seq, 1)
		ch := s.Chains[rng.Intn(len(s.Chains))]
		a := s.app(ch.AppID)
		at := ch.Expires + n*1000
		tx := map[string]string{
			"quantity": "1", "product_id": ch.Product, "transaction_id": fmt.Sprintf("7%09d%09d", runID, n),
			"original_transaction_id": ch.OTID, "purchase_date": msDate(at), "purchase_date_ms": strconv.FormatInt(at, 10),
			"original_purchase_date_ms": strconv.FormatInt(at, 10), "expires_date": msDate(at + 30*86400000),
			"expires_date_ms": strconv.FormatInt(at+30*86400000, 10), "is_trial_period": "false",
			"is_in_intro_offer_period": "false", "web_order_line_item_id": fmt.Sprintf("6%09d%09d", runID, n),
			"in_app_ownership_type": "PURCHASED", "subscription_group_identifier": ch.Group,
		}
		body, _ := json.Marshal(map[string]interface{}{
			"notification_type": "DID_RENEW", "password": a.SharedSecret, "environment": "PROD", "bid": a.BundleID,
			"auto_renew_status": "true", "auto_renew_product_id": ch.Product,
			"unified_receipt": map[string]interface{}{
				"status": 0, "environment": "Production", "latest_receipt_info": []interface{}{tx},
				"pending_renewal_info": []interface{}{map[string]string{
					"auto_renew_product_id": ch.Product, "product_id": ch.Product,
					"original_transaction_id": ch.OTID, "auto_renew_status": "1"}},
			},
		})
		b, status, err := post(client, "http://"+*httpAddr+"/v1/apps/"+ch.AppID+"/apple/notifications", body)
		if err != nil {
			return err
		}
		if status != 200 {
			return fmt.Errorf("HTTP %d: %s", status, b)
		}
		return nil
	}
	r := run(call, 0)
	report(r, 1, nil)
}

func submit(s *spec) {
	c := dial(s.Keys["ingest"])
	list := loadUsers()
	var next int64 = -1
	call := func(w int, rng *rand.Rand) error {
		u := list[atomic.AddInt64(&next, 1)]
		req := appendString(nil, 1, *appFlag)
		req = appendString(req, 2, u.UserID)
		req = appendString(req, 3, u.Receipt)
		_, err := c.invoke(w, "/substatus.v1.IngestService/SubmitReceipt", req)
		return err
	}
	r := run(call, int64(len(list)))
	report(r, 1, nil)
}

// The receipt fields a backend reads to decide intro eligibility and access.
type receiptTx struct {
	ProductID string `json:"product_id"`
	Group     string `json:"subscription_group_identifier"`
	Trial     string `json:"is_trial_period"`
	Intro     string `json:"is_in_intro_offer_period"`
	ExpiresMs string `json:"expires_date_ms"`
	Cancelled string `json:"cancellation_date_ms"`
}

type verifyResponse struct {
	Status  int `json:"status"`
	Receipt struct {
		InApp []receiptTx `json:"in_app"`
	} `json:"receipt"`
	Latest []receiptTx `json:"latest_receipt_info"`
}

func naive(s *spec) {
	client := httpClient()
	a := s.app(*appFlag)
	list := loadUsers()
	call := func(w int, rng *rand.Rand) error {
		u := list[rng.Intn(len(list))]
		body, _ := json.Marshal(map[string]interface{}{
			"receipt-data": u.Receipt, "password": a.SharedSecret, "exclude-old-transactions": false})
		b, status, err := post(client, *verifyURL, body)
		if err != nil {
			return err
		}
		if status != 200 {
			return fmt.Errorf("HTTP %d", status)
		}
		var v verifyResponse
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		if v.Status != 0 {
			return fmt.Errorf("verifyReceipt status %d", v.Status)
		}
		// Local evaluation: a group's intro offer is used once any of its transactions was a trial
		// or an intro period; a product is active while a transaction of it has not expired and
		// was not refunded.
		used := map[string]bool{}
		active := map[string]bool{}
		for _, list := range [][]receiptTx{v.Receipt.InApp, v.Latest} {
			for _, t := range list {
				if t.Trial == "true" || t.Intro == "true" {
					used[t.Group] = true
				}
				if e, _ := strconv.ParseInt(t.ExpiresMs, 10, 64); e > s.AsOfMs && t.Cancelled == "" {
					active[t.ProductID] = true
				}
			}
		}
		eligible := 0
		for _, p := range a.Products {
			if p.Intro && !used[p.Group] {
				eligible++
			}
		}
		_ = eligible
		return nil
	}
	r := run(call, 0)
	report(r, float64(len(a.Products)), map[string]interface{}{"users": 1, "products": len(a.Products)})
}

// receive: a webhook endpoint answering 204 at once (as a backend's receiver would, after a
// signature check) until SIGTERM or SIGINT. The result counts distinct events, repeats, bad
// signatures and events that arrived after a later one of their user (occurred_ms going
// backwards), and times the first and last receipt. The secret is read at the first POST: the
// webhook is created (and its secret known) after the receiver's address is.
func receive() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("listen: %v", err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	lastOccurred := map[string]int64{}
	var repeats, badSig, badID, outOfOrder, posts int64
	var first, last time.Time
	var key []byte
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := ioutil.ReadAll(r.Body)
		now := time.Now()
		var t string
		var v1 string
		for _, part := range strings.Split(r.Header.Get("Substatus-Signature"), ",") {
			if strings.HasPrefix(part, "t=") {
				t = part[2:]
			} else if strings.HasPrefix(part, "v1=") {
				v1 = part[3:]
			}
		}
		var ev struct {
			EventID  string `json:"eventId"`
			UserID   string `json:"userId"`
			Occurred string `json:"occurredMs"`
		}
		_ = json.Unmarshal(body, &ev)
		occurred, _ := strconv.ParseInt(ev.Occurred, 10, 64)
		id := r.Header.Get("Substatus-Event-Id")
		mu.Lock()
		if key == nil {
			b, err := ioutil.ReadFile(*secretFile)
			if err != nil {
				fail("read -secret-file: %v", err)
			}
			key = []byte(strings.TrimSpace(string(b)))
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(t + "."))
		mac.Write(body)
		ok := t != "" && hmac.Equal([]byte(hex.EncodeToString(mac.Sum(nil))), []byte(v1))
		posts++
		if first.IsZero() {
			first = now
		}
		last = now
		if !ok {
			badSig++
		}
		if id == "" || id != ev.EventID {
			badID++
		}
		if seen[id] {
			repeats++
		} else {
			seen[id] = true
			// One user's events are logged in Apple's time order: an earlier one after a later one
			// arrived out of order.
			if prev, had := lastOccurred[ev.UserID]; had && occurred < prev {
				outOfOrder++
			}
			lastOccurred[ev.UserID] = occurred
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	go http.Serve(ln, handler)
	if err := ioutil.WriteFile(*addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
		fail("write -addr-file: %v", err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	mu.Lock()
	defer mu.Unlock()
	b, _ := json.Marshal(map[string]interface{}{
		"mode": "receive", "events": len(seen), "posts": posts, "repeats": repeats, "bad_signatures": badSig, "bad_event_ids": badID,
		"out_of_order": outOfOrder, "first_unix_ns": first.UnixNano(), "last_unix_ns": last.UnixNano(),
		"cpu_s": procCPU("self"),
	})
	fmt.Printf("RESULT %s\n", b)
}

func main() {
	flag.Parse()
	if *mode == "seed" {
		seed() // seed.go: writes the spec it reads elsewhere
		return
	}
	if *mode == "receive" {
		receive()
		return
	}
	s := loadSpec()
	switch *mode {
	case "status":
		status(s)
	case "elig":
		eligibility(s)
	case "ingest":
		ingest(s)
	case "notify":
		notify(s)
	case "submit":
		submit(s)
	case "naive":
		naive(s)
	default:
		fail("unknown -mode %s", *mode)
	}
}
