package server

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
)

// The status page, /ui/ on the admin listener: server-rendered pages that
// work without JavaScript, behind a login that asks the admin token once
// and keeps a session in an HttpOnly, SameSite=Strict cookie. Every form
// that changes something carries the session's CSRF token. Without a
// session no page shows a policy name or a key.

//go:embed ui/style.css ui/refresh.js
var uiFiles embed.FS

//go:generate go run github.com/a-h/templ/cmd/templ@v0.3.1118 generate -f ui_pages.templ

// keyText is how the status page shows and takes a key: as it is, or
// Go-quoted when it holds a control character (a composite key's NUL
// between its parts), which parseKeyText reads back.
func keyText(key string) string {
	if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return strconv.Quote(key)
	}
	return key
}

// typed is the key that text, as the inspector takes it, names under p:
// a key as keyText shows it, or, where p's keys are credentials, the hash
// the page shows of one of its most denied keys; false for a hash that
// names none of them.
func (u *ui) typed(p *config.Policy, text string) (string, bool) {
	if p.SecretKeys && strings.HasPrefix(text, "hash:") {
		return u.s.activity.unhash(p.Name, text)
	}
	return parseKeyText(text), true
}

// parseKeyText is the key a keyText names.
func parseKeyText(text string) string {
	if strings.HasPrefix(text, `"`) {
		if k, err := strconv.Unquote(text); err == nil {
			return k
		}
	}
	return text
}

// flashes are the messages a redirect may ask a page to show, by name: a
// link cannot make the page say anything else.
var flashes = map[string]string{
	"confirm": "Tick the box to confirm the reset.",
	"reset":   "Reset: the key starts afresh.",
}

const (
	sessionCookie = "sluice_ui"
	sessionTTL    = 8 * time.Hour
	maxSessions   = 1000
)

type session struct {
	csrf    string
	expires time.Time
	token   [sha256.Size]byte // the admin token it was made with: a new one ends it
}

// ui serves the status page.
type ui struct {
	s        *Server
	failures *sluice.Limiter // wrong tokens per address, shared with the admin API
	static   http.Handler
	mu       sync.Mutex
	sessions map[string]session
}

func newUI(s *Server, failures *sluice.Limiter) *ui {
	sub, _ := fs.Sub(uiFiles, "ui")
	return &ui{s: s, failures: failures, sessions: map[string]session{},
		static: http.StripPrefix("/ui/static/", http.FileServerFS(sub))}
}

func token() string {
	b := make([]byte, 24)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tokenSum is what a session keeps of the admin token it was made with.
func tokenSum(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// session returns the request's live session and its id: made with the
// admin token in force, and not expired.
func (u *ui) session(r *http.Request) (string, session, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", session{}, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	sess, ok := u.sessions[c.Value]
	if !ok || time.Now().After(sess.expires) || sess.token != tokenSum(u.s.adminToken()) {
		delete(u.sessions, c.Value)
		return "", session{}, false
	}
	return c.Value, sess, true
}

func (u *ui) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case strings.HasPrefix(r.URL.Path, "/ui/static/"):
		u.static.ServeHTTP(w, r)
		return
	case r.URL.Path == "/ui/login":
		u.login(w, r)
		return
	}
	_, sess, ok := u.session(r)
	if !ok {
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
		return
	}
	if r.Method == http.MethodPost && subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(sess.csrf)) != 1 {
		http.Error(w, "a form from this session is required (CSRF token)", http.StatusForbidden)
		return
	}
	page := pageHead{Session: true, CSRF: sess.csrf}
	switch {
	case r.URL.Path == "/ui/" && r.Method == http.MethodGet:
		u.overview(w, r, page)
	case strings.HasPrefix(r.URL.Path, "/ui/policy/") && r.Method == http.MethodGet:
		u.policy(w, r, strings.TrimPrefix(r.URL.Path, "/ui/policy/"), page)
	case r.URL.Path == "/ui/reset" && r.Method == http.MethodPost:
		u.reset(w, r)
	case r.URL.Path == "/ui/logout" && r.Method == http.MethodPost:
		u.logout(w, r)
	case r.URL.Path == "/ui/sim" && r.Method == http.MethodGet:
		u.simulate(w, r, page)
	default:
		http.NotFound(w, r)
	}
}

// render writes page, a component of ui_pages.templ, whole or not at
// all: a failure midway answers 500.
func (u *ui) render(w http.ResponseWriter, r *http.Request, page templ.Component) {
	var b bytes.Buffer
	if err := page.Render(r.Context(), &b); err != nil {
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		u.s.log.Error("ui: rendering failed", "path", r.URL.Path, "error", err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b.Bytes())
}

// login asks for the admin token once; wrong tokens are throttled per
// address and logged, as on the admin API.
func (u *ui) login(w http.ResponseWriter, r *http.Request) {
	page := pageHead{Title: "Log in"}
	if r.Method != http.MethodPost {
		u.render(w, r, loginPage(page, ""))
		return
	}
	from := remoteIP(r)
	given := r.PostFormValue("token")
	ok, locked, _ := u.s.admitToken(r.Context(), u.failures, from, given, given)
	if locked {
		u.s.refusedAdmin(lockedOut, "ui: wrong tokens from this address; refused until the oldest is a minute old", from)
		w.WriteHeader(http.StatusTooManyRequests)
		u.render(w, r, loginPage(page, "Too many wrong tokens from this address: try again in a minute."))
		return
	}
	if !ok {
		u.s.refusedAdmin(wrongToken, "ui: refused: wrong admin token", from)
		w.WriteHeader(http.StatusUnauthorized)
		u.render(w, r, loginPage(page, "That is not the admin token."))
		return
	}
	id := token()
	u.mu.Lock()
	if len(u.sessions) >= maxSessions {
		for k := range u.sessions { // drop one: the oldest matters little
			delete(u.sessions, k)
			break
		}
	}
	u.sessions[id] = session{csrf: token(), expires: time.Now().Add(sessionTTL), token: tokenSum(u.s.adminToken())}
	u.mu.Unlock()
	u.s.log.Info("ui: logged in", "remote", from)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(sessionTTL / time.Second)})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (u *ui) logout(w http.ResponseWriter, r *http.Request) {
	if id, _, ok := u.session(r); ok {
		u.mu.Lock()
		delete(u.sessions, id)
		u.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// row is one policy's or domain's line of the overview.
type row struct {
	Name, Limits, FailMode  string
	Shadow                  bool
	Allowed, Denied, Failed int64
	Spark                   string // trusted markup: sparkline's
}

// sparkWindow is the seconds a sparkline shows.
const sparkWindow = 300

func (u *ui) row(name string) row {
	a, d, f := u.s.activity.rates(name, sparkWindow)
	r := row{Name: name, Spark: sparkline(a, d, f)}
	for i := sparkWindow - 60; i < sparkWindow; i++ {
		r.Allowed, r.Denied, r.Failed = r.Allowed+a[i], r.Denied+d[i], r.Failed+f[i]
	}
	return r
}

func (u *ui) overview(w http.ResponseWriter, r *http.Request, page pageHead) {
	cfg := u.s.state().cfg
	var policies, domains []row
	for _, p := range cfg.Policies {
		rw := u.row(p.Name)
		rw.Limits, rw.FailMode, rw.Shadow = limitsText(p.Limits), p.FailMode.String(), p.Shadow
		policies = append(policies, rw)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Domains)) {
		rw := u.row(name)
		rw.Limits = fmt.Sprintf("%d descriptors", len(cfg.Domains[name].Descriptors))
		domains = append(domains, rw)
	}
	page.Title, page.Refresh = "Overview", true
	u.render(w, r, overviewPage(page, overview{Store: u.s.storeType, Health: u.s.guard.Health(),
		Policies: policies, Domains: domains, Reloads: u.s.history.all()}))
}

// keyState is one limit's state of an inspected key.
type keyState struct {
	Limit                  string
	Allowed                bool
	Remaining              int64
	RetryAfter, ResetAfter time.Duration
}

type topRow struct {
	Key        string
	Count, Min int64
}

func (u *ui) policy(w http.ResponseWriter, r *http.Request, name string, page pageHead) {
	cfg := u.s.state().cfg
	p := cfg.Policy(name)
	if p == nil && cfg.Domains[name] == nil {
		http.NotFound(w, r)
		return
	}
	page.Title = name
	v := policyView{Name: name, Spark: u.row(name).Spark, IsPolicy: p != nil, KeysOff: cfg.UI.TopKeys == 0,
		Limits: "Envoy domain", Flash: flashes[r.URL.Query().Get("flash")]}
	if p != nil {
		v.Limits = limitsText(p.Limits)
		if st := u.s.activity.settledOf(name); st.Settles > 0 || p.CostFrom.String() != "" || len(p.ChargeStatus) > 0 {
			v.Settled = &st
		}
	}
	for _, it := range u.s.activity.top(name) {
		v.Top = append(v.Top, topRow{Key: shownKey(cfg, name, it.Key), Count: it.Count, Min: it.Count - it.Error})
	}
	if text := r.URL.Query().Get("key"); text != "" && p != nil {
		v.Key = text // as typed or linked: a hash stays one
		key, ok := u.typed(p, text)
		if !ok {
			v.Flash = "No key denied lately has that hash: type the key itself."
			u.render(w, r, policyPage(page, v))
			return
		}
		limits := u.s.overrides.LimitsFor(p, key, "")
		v.Limits = limitsText(limits) // the key's own, where an override gives it some
		for _, l := range limits {
			d, err := u.s.store.Take(r.Context(), sluice.Request{Key: p.Name + "\x00" + key, Limit: l})
			if err != nil {
				v.Flash = "The store did not answer: " + err.Error()
				break
			}
			v.State = append(v.State, keyState{Limit: l.String(), Allowed: d.Allowed, Remaining: d.Remaining,
				RetryAfter: d.RetryAfter.Round(time.Millisecond), ResetAfter: d.ResetAfter.Round(time.Millisecond)})
		}
	}
	u.render(w, r, policyPage(page, v))
}

// reset forgets a key under a policy's limits, after the form's
// confirmation; audited in the log.
func (u *ui) reset(w http.ResponseWriter, r *http.Request) {
	name, text := r.PostFormValue("policy"), r.PostFormValue("key")
	p := u.s.state().cfg.Policy(name)
	if p == nil || text == "" {
		http.NotFound(w, r)
		return
	}
	key, ok := u.typed(p, text)
	if !ok {
		http.NotFound(w, r)
		return
	}
	back := string(policyURL(name, text))
	if r.PostFormValue("confirm") != "yes" {
		http.Redirect(w, r, back+"&flash=confirm", http.StatusSeeOther)
		return
	}
	for _, l := range u.s.overrides.LimitsFor(p, key, "") { // the limits the key is decided under

		start := time.Now()
		err := u.s.store.Reset(r.Context(), p.Name+"\x00"+key, l)
		u.s.metrics.storeCall("reset", time.Since(start), err)
		if err != nil {
			http.Error(w, "the store did not answer", http.StatusServiceUnavailable)
			return
		}
	}
	u.s.log.Info("ui: key reset", "remote", remoteIP(r), "policy", name, "key", config.ShownKey(key, p.SecretKeys))
	http.Redirect(w, r, back+"&flash=reset", http.StatusSeeOther)
}

// simulate runs the simulator on a bounded amount of traffic and shows
// its table and chart.
func (u *ui) simulate(w http.ResponseWriter, r *http.Request, page pageHead) {
	q := r.URL.Query()
	page.Title = "Simulator"
	v := simView{Traffic: orDefault(q.Get("traffic"), "boundary"), Limit: orDefault(q.Get("limit"), "10/1s"),
		Algorithms: q.Get("algorithms"), Traffics: []string{"boundary", "bursty", "zipf"}}
	defer func() { u.render(w, r, simPage(page, v)) }()
	traffic, algs := v.Traffic, v.Algorithms
	if !slices.Contains(v.Traffics, traffic) {
		v.Error = fmt.Sprintf("traffic %q: want one of boundary, bursty or zipf", traffic)
		return
	}
	limit, err := sluice.ParseLimit(v.Limit)
	if err != nil {
		v.Error = err.Error()
		return
	}
	bin := max(limit.Period/10, time.Millisecond)
	cfg := sim.Config{Limit: limit, Bin: bin}
	for _, a := range strings.FieldsFunc(algs, func(r rune) bool { return r == ',' || r == ' ' }) {
		alg, err := sluice.ParseAlgorithm(a)
		if err != nil {
			v.Error = err.Error()
			return
		}
		cfg.Algorithms = append(cfg.Algorithms, alg)
	}
	switch traffic {
	case "bursty":
		cfg.Traffic = sim.OnOff(6*float64(limit.Rate)/limit.Period.Seconds(), limit.Period/2, limit.Period*3/2, 20*limit.Period, 3, 1)
	case "zipf":
		cfg.Traffic = sim.Zipf(30_000, 3_000, 1_000, 1.1, 1)
	case "boundary":
		cfg.Traffic = sim.BoundaryAttack(limit.Rate, limit.Period, 5)
	}
	results, err := sim.Run(cfg)
	if err != nil {
		v.Error = err.Error()
		return
	}
	var table, svg bytes.Buffer
	sim.Format(&table, limit, results)
	v.Table = table.String()
	if err := sim.Chart(&svg, "svg", fmt.Sprintf("%s traffic, limit %d per %v", traffic, limit.Rate, limit.Period), limit, bin, results); err != nil {
		v.Error = err.Error()
		return
	}
	chart := svg.Bytes()
	if i := bytes.Index(chart, []byte("<svg")); i > 0 {
		chart = chart[i:] // inline: no XML declaration
	}
	v.Chart = string(chart) // made by the simulator from numbers and the names above, escaped by it
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func limitsText(ls []sluice.Limit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.String()
	}
	return strings.Join(parts, " and ")
}

// sparkline draws per-second counts as an inline SVG: allowed blue,
// denied red, failed amber, on one scale.
func sparkline(series ...[]int64) string {
	const w, h = 240, 36
	var top int64 = 1
	for _, s := range series {
		for _, v := range s {
			top = max(top, v)
		}
	}
	colors := []string{"#2f81f7", "#d1242f", "#bf8700"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="checks per second, peak %d">`, w, h, w, h, top)
	for i, s := range series {
		if len(s) < 2 {
			continue
		}
		b.WriteString(`<polyline fill="none" stroke-width="1.2" stroke="` + colors[i%len(colors)] + `" points="`)
		for j, v := range s {
			x := float64(j) * float64(w-1) / float64(len(s)-1)
			y := float64(h-2) - float64(v)*float64(h-4)/float64(top)
			b.WriteString(strconv.FormatFloat(x, 'f', 1, 64) + "," + strconv.FormatFloat(y, 'f', 1, 64) + " ")
		}
		b.WriteString(`"/>`)
	}
	b.WriteString(`<text x="2" y="10" font-size="9" fill="#57606a">` + strconv.FormatInt(top, 10) + `/s</text></svg>`)
	return b.String()
}
