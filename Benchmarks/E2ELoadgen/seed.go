// The data of `make bench COMPARE=<ref>` (scripts/bench_compare.py), written through the API so
// that every build, whatever its schema, stores the same data its own way:
//
//	seed    on a substatusd that has just created its operator key (-operator-key-file): a tenant,
//	        -apps apps with the datagen's 20-product catalog, READ and INGEST keys, then the
//	        histories of users [0, -count) imported with ImportTransactions (one user per call,
//	        -concurrency in flight, every item checked CREATED). Writes -out/bench.json and
//	        -out/users.txt in substatus-e2e-datagen's format (the ids the server gave), so the other
//	        modes run on it. The RESULT line measures the import alone (server CPU with -server-pid).
//	status  GetStatus of one random user of a random app per call.
//
// The histories are those of Benchmarks/E2EData/main.swift (generator version 2): the same
// SplitMix64 streams, user ids, counts and shapes, around -as-of (ms) instead of 2026-01-01, so
// that a load asking at the server's clock (-now) meets them as they are now.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/ioutil"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
)

// seedGeneratorVersion changes whenever the seeded data changes (scripts/bench_compare.py keys its
// cache by it).
const seedGeneratorVersion = 1

const day int64 = 86_400_000

var (
	atNow           = flag.Bool("now", false, "elig, status: ask at the server's clock (no as_of_ms), as apps do")
	outDir          = flag.String("out", "", "seed: the directory for bench.json and users.txt")
	operatorKeyFile = flag.String("operator-key-file", "", "seed: the operator key substatusd wrote at its first start")
	seedCount       = flag.Int("count", 0, "seed: how many users to import")
	seedApps        = flag.Int("apps", 10, "seed: how many apps")
	seedAsOf        = flag.Int64("as-of", 1_767_225_600_000, "seed: the instant (ms) the histories are built around")
)

type splitMix64 struct{ state uint64 }

func (r *splitMix64) next() uint64 {
	r.state += 0x9E3779B97F4A7C15
	z := r.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (r *splitMix64) below(n int) int { return int(r.next() % uint64(n)) }

// seedUserID is user i's id: the datagen's userId(i), a version-4 UUID fixed by i.
func seedUserID(i int) string {
	rng := splitMix64{state: uint64(i)*0x9FB21C651E98DF25 + 0x5851F42D4C957F2D}
	hi, lo := rng.next(), rng.next()
	version := (hi &^ 0xF000) | 0x4000
	variant := (lo &^ (0xC << 60)) | (0x8 << 60)
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", version>>32, (version>>16)&0xFFFF, version&0xFFFF,
		variant>>48, variant&0xFFFFFFFFFFFF)
}

func seedBundleID(a int) string   { return fmt.Sprintf("com.example.app%d", a) }
func seedGroupID(a, g int) string { return fmt.Sprint(21_000_000 + a*10 + g) }

type seedPeriod struct {
	suffix, duration string
	ms               int64
}

var seedPeriods = []seedPeriod{{"weekly", "P1W", 7 * day}, {"monthly", "P1M", 30 * day},
	{"quarterly", "P3M", 91 * day}, {"yearly", "P1Y", 365 * day}}

// seedCatalog is app a's 20 products (the datagen's catalog).
func seedCatalog(a int) []specProduct {
	bundle := seedBundleID(a)
	var out []specProduct
	for g := 0; g < 4; g++ {
		for _, p := range seedPeriods {
			out = append(out, specProduct{ProductID: fmt.Sprintf("%s.g%d.%s", bundle, g, p.suffix),
				Type: "AUTO_RENEWABLE", Group: seedGroupID(a, g), Intro: p.suffix != "weekly"})
		}
	}
	out = append(out, specProduct{ProductID: bundle + ".pass30", Type: "NON_RENEWING"},
		specProduct{ProductID: bundle + ".pass1y", Type: "NON_RENEWING"},
		specProduct{ProductID: bundle + ".lifetime", Type: "NON_CONSUMABLE"},
		specProduct{ProductID: bundle + ".theme", Type: "NON_CONSUMABLE"})
	return out
}

// productMessage is a Product of PutProducts.
func productMessage(p specProduct, bundle string) []byte {
	m := appendString(nil, 1, p.ProductID)
	switch p.Type {
	case "AUTO_RENEWABLE":
		m = appendInt(m, 2, 1)
		m = appendString(m, 3, p.Group)
		for _, sp := range seedPeriods {
			if strings.HasSuffix(p.ProductID, "."+sp.suffix) {
				m = appendString(m, 4, sp.duration)
			}
		}
		m = appendBool(m, 5, p.Intro)
		g := strings.Split(strings.TrimPrefix(p.ProductID, bundle+"."), ".")[0]
		m = appendString(m, 6, bundle+"."+g+".winback")
	case "NON_RENEWING":
		m = appendInt(m, 2, 2)
		if strings.HasSuffix(p.ProductID, ".pass30") {
			m = appendString(m, 4, "P30D")
		} else {
			m = appendString(m, 4, "P1Y")
		}
	default:
		m = appendInt(m, 2, 3)
	}
	return m
}

func seedTransactionCount(i int) int {
	pair := splitMix64{state: uint64(i/2) * 0xA24BAED4963EE407}
	d := pair.below(8)
	if i%2 == 0 {
		return 10 + d
	}
	return 10 - d
}

// seedPurchases is user i's ImportTransactionsRequest (app index i % apps) and its transaction
// count: the datagen's purchases(i), as of asOf.
func seedPurchases(i, apps int, appID string, asOf int64) ([]byte, int) {
	rng := splitMix64{state: uint64(i)*0xD1B54A32D192ED03 + 17}
	a := i % apps
	bundle := seedBundleID(a)
	n := seedTransactionCount(i)
	nextID := 4_000_000_000_000_000 + i*32
	req := appendString(nil, 1, appID)
	req = appendString(req, 2, seedUserID(i))
	count := 0
	tx := func(fields []byte) {
		req = appendMessage(req, 3, fields)
		count++
	}
	kind := rng.below(100)
	if kind < 10 {
		first := asOf - int64(rng.below(700))*day
		product := "theme"
		if kind < 5 {
			product = "lifetime"
		}
		t := appendString(nil, 1, fmt.Sprint(nextID))
		t = appendString(t, 3, bundle+"."+product)
		t = appendInt(t, 5, first)
		t = appendInt(t, 15, 1) // PURCHASED
		t = appendInt(t, 17, 1) // PRODUCTION
		t = appendInt(t, 19, 1)
		t = appendInt(t, 20, 3) // NON_CONSUMABLE
		t = appendInt(t, 23, first)
		tx(t)
		nextID++
		for k := 0; k < n-1; k++ {
			at := first + int64(k)*35*day
			t := appendString(nil, 1, fmt.Sprint(nextID))
			t = appendString(t, 3, bundle+".pass30")
			t = appendInt(t, 5, at)
			t = appendInt(t, 7, at+30*day)
			t = appendInt(t, 15, 1)
			t = appendInt(t, 17, 1)
			t = appendInt(t, 19, 1)
			t = appendInt(t, 20, 2) // NON_RENEWING
			t = appendInt(t, 23, at)
			tx(t)
			nextID++
		}
		return req, count
	}
	lengths := []int{n}
	if kind < 30 && n >= 6 {
		lengths = []int{n / 2, n - n/2}
	}
	firstGroup := rng.below(4)
	for c, length := range lengths {
		g := (firstGroup + c) % 4
		roll := rng.below(100)
		period := seedPeriods[3]
		switch {
		case roll < 60:
			period = seedPeriods[1]
		case roll < 75:
			period = seedPeriods[0]
		case roll < 85:
			period = seedPeriods[2]
		}
		product := fmt.Sprintf("%s.g%d.%s", bundle, g, period.suffix)
		state := rng.below(100) // < 55 active, < 85 lapsed, < 93 billing retry, else refunded
		trial := rng.below(100) < 60
		var lastExpires int64
		switch {
		case state < 55:
			lastExpires = asOf + int64(rng.below(int(period.ms/day)))*day + day
		case state < 85:
			lastExpires = asOf - int64(1+rng.below(400))*day
		default:
			lastExpires = asOf - int64(1+rng.below(10))*day
		}
		start := lastExpires - int64(length)*period.ms
		original := fmt.Sprint(nextID)
		for k := 0; k < length; k++ {
			at := start + int64(k)*period.ms
			refunded := state >= 93 && k == length-1
			t := appendString(nil, 1, fmt.Sprint(nextID))
			t = appendString(t, 2, original)
			t = appendString(t, 3, product)
			t = appendString(t, 4, seedGroupID(a, g))
			t = appendInt(t, 5, at)
			t = appendInt(t, 6, start)
			t = appendInt(t, 7, at+period.ms)
			if trial && k == 0 {
				t = appendBool(t, 8, true)
				t = appendInt(t, 10, 1) // INTRODUCTORY
			}
			if refunded {
				t = appendInt(t, 12, at+3*day)
				t = appendInt(t, 13, 1) // OTHER
				t = appendInt(t, 14, 1) // REFUND_FULL
			}
			t = appendInt(t, 15, 1)
			t = appendInt(t, 17, 1)
			t = appendString(t, 18, fmt.Sprint(5_000_000_000_000_000+i*32+count))
			t = appendInt(t, 19, 1)
			t = appendInt(t, 20, 1) // AUTO_RENEWABLE
			if trial && k == 0 {
				t = appendInt(t, 22, 1) // FREE_TRIAL
			}
			t = appendInt(t, 23, at)
			tx(t)
			nextID++
		}
		retry := state >= 85 && state < 93
		r := appendString(nil, 1, original)
		r = appendString(r, 2, product)
		r = appendString(r, 3, product)
		r = appendBool(r, 4, state < 55 || retry)
		switch {
		case state < 55:
		case retry:
			r = appendInt(r, 5, 2) // BILLING_ERROR
		default:
			r = appendInt(r, 5, 1) // CUSTOMER_CANCELLED
		}
		r = appendBool(r, 6, retry)
		if retry {
			r = appendInt(r, 7, lastExpires+16*day)
		}
		r = appendInt(r, 8, 1)
		if state < 55 {
			r = appendInt(r, 11, lastExpires)
		}
		r = appendInt(r, 15, start)
		req = appendMessage(req, 4, r)
	}
	return req, count
}

// stringField is field f (length-delimited) of message m, or "".
func stringField(m []byte, f int) string {
	var s string
	fields(m, func(field int, _ uint64, data []byte) {
		if field == f && s == "" {
			s = string(data)
		}
	})
	return s
}

// messageField is field f (a message) of m, or nil.
func messageField(m []byte, f int) []byte {
	var out []byte
	fields(m, func(field int, _ uint64, data []byte) {
		if field == f && out == nil {
			out = data
		}
	})
	return out
}

func seed() {
	if *outDir == "" || *operatorKeyFile == "" || *seedCount <= 0 {
		fail("seed needs -out, -operator-key-file and -count")
	}
	b, err := ioutil.ReadFile(*operatorKeyFile)
	if err != nil {
		fail("read -operator-key-file: %v", err)
	}
	must := func(what string) func([]byte, error) []byte {
		return func(resp []byte, err error) []byte {
			if err != nil {
				fail("%s: %v", what, err)
			}
			return resp
		}
	}
	saved := *conns
	*conns = 1
	op := dial(strings.TrimSpace(string(b)))
	resp := must("CreateTenant")(op.invoke(0, "/substatus.v1.TenantService/CreateTenant", appendString(nil, 1, "bench")))
	adminKey := stringField(resp, 2)
	admin := dial(adminKey)
	keys := map[string]string{"admin": adminKey}
	for _, k := range []struct {
		name string
		role int64
	}{{"read", 3}, {"ingest", 2}} {
		req := appendInt(nil, 1, k.role)
		req = appendString(req, 3, "bench "+k.name)
		keys[k.name] = stringField(must("CreateApiKey")(admin.invoke(0, "/substatus.v1.AdminService/CreateApiKey", req)), 2)
	}
	var apps []specApp
	for a := 0; a < *seedApps; a++ {
		bundle := seedBundleID(a)
		req := appendString(nil, 1, bundle)
		req = appendString(req, 3, fmt.Sprintf("app-%d", a))
		app := messageField(must("RegisterApp")(admin.invoke(0, "/substatus.v1.AdminService/RegisterApp", req)), 1)
		id := stringField(app, 1)
		products := seedCatalog(a)
		put := appendString(nil, 1, id)
		for _, p := range products {
			put = appendMessage(put, 2, productMessage(p, bundle))
		}
		must("PutProducts")(admin.invoke(0, "/substatus.v1.AdminService/PutProducts", put))
		apps = append(apps, specApp{AppID: id, BundleID: bundle, Products: products})
	}
	*conns = saved
	ids := make([]string, *seedCount)
	for i := range ids {
		ids[i] = seedUserID(i)
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		fail("%v", err)
	}
	if err := ioutil.WriteFile(filepath.Join(*outDir, "users.txt"), []byte(strings.Join(ids, "\n")+"\n"), 0o644); err != nil {
		fail("%v", err)
	}
	spec := map[string]interface{}{
		"generator": fmt.Sprintf("e2e-loadgen -mode seed, version %d (the histories of substatus-e2e-datagen version 2)", seedGeneratorVersion),
		"users":     *seedCount, "apps": *seedApps, "transactions": *seedCount * 10, "as_of_ms": *seedAsOf,
		"keys": keys, "user_ids": "users.txt", "apps_detail": apps, "chains": []interface{}{},
	}
	js, _ := json.MarshalIndent(spec, "", " ")
	if err := ioutil.WriteFile(filepath.Join(*outDir, "bench.json"), js, 0o644); err != nil {
		fail("%v", err)
	}

	c := dial(keys["ingest"])
	var next, stored int64 = -1, 0
	call := func(w int, _ *rand.Rand) error {
		i := int(atomic.AddInt64(&next, 1))
		req, n := seedPurchases(i, *seedApps, apps[i%*seedApps].AppID, *seedAsOf)
		resp, err := c.invoke(w, "/substatus.v1.IngestService/ImportTransactions", req)
		if err != nil {
			return fmt.Errorf("user %d: %v", i, err)
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
		if created != n {
			return fmt.Errorf("user %d: %d of %d transactions created", i, created, n)
		}
		atomic.AddInt64(&stored, int64(n))
		return nil
	}
	r := run(call, int64(*seedCount))
	if r.errors > 0 {
		fail("seed: %d of %d users failed, first: %s", r.errors, *seedCount, r.firstError)
	}
	report(r, float64(stored)/float64(r.calls), map[string]interface{}{"transactions": stored, "users": *seedCount})
}

func status(s *spec) {
	c := dial(s.Keys["read"])
	ids := s.userIDs()
	call := func(w int, rng *rand.Rand) error {
		i := rng.Intn(len(ids))
		app := s.Detail[i%s.Apps].AppID
		req := appendString(nil, 1, app)
		req = appendString(req, 2, ids[i])
		if !*atNow {
			req = appendInt(req, 3, s.AsOfMs)
		}
		resp, err := c.invoke(w, "/substatus.v1.StatusService/GetStatus", req)
		if err != nil {
			return err
		}
		groups := 0
		var uid string
		err = fields(resp, func(f int, _ uint64, data []byte) {
			if f == 1 {
				uid = string(data)
			} else if f == 2 {
				groups++
			}
		})
		if err != nil || uid != ids[i] {
			return fmt.Errorf("bad answer for %s: user %q, %d groups (err %v)", ids[i], uid, groups, err)
		}
		return nil
	}
	r := run(call, 0)
	report(r, 1, nil)
}
