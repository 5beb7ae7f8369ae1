package preview

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"

	"github.com/sbxedge/sbx/internal/problem"
)

// Pages a browser sees instead of a problem document: each names what
// happened in words, what to do next, and the problem code (which is what
// support and the docs key on). The waking page is not an error: it shows
// a wake step by step and hands over to the app by itself.

// problemPage is a problem the proxy answers a failed wake with.
type problemPage = *problem.Problem

var (
	pageEnded       = errEnded
	pageWakeTimeout = errWakeTimeout
	pageWakeFailed  = errNotReady
)

// portClosedPage is the answer for a port nothing listens on and no
// service declares.
func portClosedPage(port int) problemPage {
	return problem.New(http.StatusBadGateway, errUpstream.Code,
		fmt.Sprintf("nothing is listening on port %d inside the sandbox, and no service declares it", port))
}

// crashLoopPage is the answer for a port whose service keeps exiting:
// 502, as for a port nothing listens on, with its own code, the exit code
// and the service's last lines.
func crashLoopPage(e *crashLoopError) problemPage {
	p := problem.New(http.StatusBadGateway, "service_crashing", e.Error())
	p.Logs = e.logs
	return p
}

// crashService names the service a wake gave up on, if that is why.
func crashService(err error) string {
	var crash *crashLoopError
	if errors.As(err, &crash) {
		return crash.service
	}
	return ""
}

// pageText is what a page says for one problem code. In next, text
// between backticks is a command or a value to copy, shown as code, and
// <id> and <port> stand for the sandbox's id and port where the page may
// name them.
type pageText struct{ headline, next string }

var pageTexts = map[string]pageText{
	"preview_not_found": {"No preview at this address",
		"Check the address. `sbx ports <sandbox>` lists a sandbox's preview URLs; a URL stops working when its port is unexposed or its sandbox ends."},
	"upstream_unreachable": {"Nothing is listening on this port",
		"Start your dev server inside the sandbox on this port (bound to localhost, 127.0.0.1, ::1 or 0.0.0.0), then reload. To have it start by itself, also after the sandbox wakes, declare it as a service: `sbx services set <id> <name> --port <port> -- <command>` (or PUT /api/v1/sandboxes/<id>/services/<name>)."},
	"sandbox_ended": {"This sandbox has ended",
		"Its workspace and previews are gone. Create a new sandbox (`sbx create`) and expose the port again (`sbx ports <id> <port>`)."},
	"preview_forbidden": {"You don't have access to this preview",
		"You are signed in, but not as a member of the account that owns this sandbox. Sign in with another account, or ask the sandbox's owner to add you to the preview members."},
	"cross_origin_refused": {"Blocked: a request from another site",
		"Your preview session only works for pages of this preview. Open the preview directly, or send an account token from scripts on other sites."},
	"preview_unauthenticated": {"Sign in to see this preview",
		"Open this address in your browser to sign in, or send an account token as 'Authorization: Bearer <token>'."},
	"preview_invalid_token": {"That sign-in is no longer valid",
		"Reload to sign in again, or use a token that has not been revoked or expired."},
	"sandbox_waking": {"The app did not come up in time",
		"The sandbox is awake, but its port did not answer within the wake limit. Reload to keep waiting, and check the service's logs: `sbx services logs <id> <name>`."},
	"service_crashing": {"The app keeps crashing",
		"Read its log (`sbx services logs <id> <name>`), fix the command, then declare it again: `sbx services set <id> <name> --port <port> -- <command>`."},
	"sandbox_not_ready": {"The sandbox could not be woken just now",
		"Reload in a few seconds. If it keeps failing, check the sandbox's events (`sbx events <id>`)."},
	"preview_busy": {"This preview is busy",
		"Too many requests are open to it at once. Reload in a moment."},
	"control_unavailable": {"The preview service is briefly unavailable",
		"Reload in a few seconds."},
	"share_revoked": {"This share link was revoked",
		"Ask whoever shared this preview with you for a new link. If you have an account, open the preview's address without the link and sign in."},
	"share_expired": {"This share link has expired",
		"Share links open a preview for a limited time. Ask whoever shared it for a new link (`sbx share <id> <port> --for 2h`)."},
	"share_not_found": {"This share link is not valid",
		"Check that the whole link was copied. A link opens only the preview it was made for."},
	"login_invalid": {"That sign-in link has expired",
		"Open the preview's address again to sign in."},
}

// pageData is what errorPage renders.
type pageData struct {
	Status   int
	Code     string
	Headline string
	Detail   string
	Next     template.HTML
	Refresh  bool
	Logs     []string
	// Port and PortLabel name the port when it has a label.
	Port      int
	PortLabel string
}

// pageSubject is what a page may name in its commands: each known one
// takes the place of its <id> or <port>.
type pageSubject struct {
	sandboxID string
	port      int
	service   string // <name>
	portLabel string
}

// pageText is the page text for code.
func pageTextOf(code string) pageText {
	if t, ok := pageTexts[code]; ok {
		return t
	}
	return pageText{"Something went wrong", "Reload the page; if it persists, quote the code below."}
}

// pageNext is what to do for code, its commands filled in from s.
func pageNext(code string, s pageSubject) string {
	next := pageTextOf(code).next
	if s.sandboxID != "" {
		next = strings.ReplaceAll(next, "<id>", s.sandboxID)
	}
	if s.port != 0 {
		next = strings.ReplaceAll(next, "<port>", strconv.Itoa(s.port))
	}
	if s.service != "" {
		next = strings.ReplaceAll(next, "<name>", s.service)
	}
	return next
}

// pageFor is the page for p, its commands filled in from s.
func pageFor(p *problem.Problem, s pageSubject) pageData {
	return pageData{Status: p.Status, Code: p.Code, Headline: pageTextOf(p.Code).headline, Detail: p.Detail, Next: codeSpans(pageNext(p.Code, s)),
		Refresh: p.RetryAfter > 0 && p.Code != errWakeTimeout.Code, Logs: p.Logs, Port: s.port, PortLabel: s.portLabel}
}

// codeSpans escapes s and shows each `quoted` part of it as <code>. An
// unpaired backtick stays as it is.
func codeSpans(s string) template.HTML {
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '`')
		j := -1
		if i >= 0 {
			j = strings.IndexByte(s[i+1:], '`')
		}
		if j < 0 {
			b.WriteString(template.HTMLEscapeString(s))
			return template.HTML(b.String())
		}
		b.WriteString(template.HTMLEscapeString(s[:i]))
		b.WriteString("<code>" + template.HTMLEscapeString(s[i+1:i+1+j]) + "</code>")
		s = s[i+2+j:]
	}
}

const pageStyle = `
:root{color-scheme:light dark;--bg:#f6f7f9;--card:#fff;--fg:#1d2330;--muted:#667085;--line:#e4e7ec;--accent:#3b5bdb;--ok:#2f9e44;--bad:#c92a2a}
@media (prefers-color-scheme:dark){:root{--bg:#101319;--card:#181c24;--fg:#e6e8ee;--muted:#98a2b3;--line:#2a303c;--accent:#748ffc;--ok:#51cf66;--bad:#ff6b6b}}
*{box-sizing:border-box}body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;background:var(--bg);color:var(--fg);font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif}
.card{background:var(--card);border:1px solid var(--line);border-radius:14px;padding:2em 2.2em;max-width:34em;width:calc(100% - 2em);box-shadow:0 8px 30px rgba(0,0,0,.06)}
h1{font-size:1.35em;margin:0 0 .4em}.meta{color:var(--muted);font-size:.9em;margin:0 0 1.2em}.meta code{font-size:.95em}
code{font:.9em ui-monospace,monospace;background:color-mix(in srgb,var(--muted) 12%,transparent);border-radius:4px;padding:.05em .3em}
p{margin:.5em 0}.next{border-left:3px solid var(--accent);padding:.4em .9em;margin:1.2em 0;background:color-mix(in srgb,var(--accent) 7%,transparent);border-radius:0 8px 8px 0}
.code{display:inline-block;margin-top:1em;font:12px ui-monospace,monospace;color:var(--muted);border:1px solid var(--line);border-radius:6px;padding:.15em .5em}
ol.steps{list-style:none;padding:0;margin:1.2em 0}ol.steps li{display:flex;align-items:center;gap:.7em;padding:.35em 0;color:var(--muted)}
ol.steps li .dot{width:1.1em;height:1.1em;border-radius:50%;border:2px solid var(--line);flex:none}
ol.steps li.done{color:var(--fg)}ol.steps li.done .dot{background:var(--ok);border-color:var(--ok)}
ol.steps li.now{color:var(--fg);font-weight:600}ol.steps li.now .dot{border-color:var(--accent);border-top-color:transparent;animation:spin .8s linear infinite}
ol.steps li.bad .dot{background:var(--bad);border-color:var(--bad)}
@keyframes spin{to{transform:rotate(360deg)}}.elapsed{font-variant-numeric:tabular-nums;color:var(--muted);font-size:.9em}
pre.logs{font:12px/1.45 ui-monospace,monospace;background:color-mix(in srgb,var(--muted) 10%,transparent);border:1px solid var(--line);border-radius:8px;padding:.7em .9em;margin:1em 0;overflow-x:auto;white-space:pre-wrap;max-height:16em;overflow-y:auto}
button{font:inherit;padding:.4em 1em;border-radius:8px;border:1px solid var(--line);background:var(--card);color:var(--fg);cursor:pointer}
`

// sentence capitalises a problem's detail and ends it with a full stop.
func sentence(s string) string {
	if s == "" {
		return s
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

var errorPage = template.Must(template.New("error").Funcs(template.FuncMap{"sentence": sentence, "spans": codeSpans}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{{.Headline}}</title>
{{if .Refresh}}<meta http-equiv="refresh" content="5">{{end}}
<style>` + pageStyle + `</style></head>
<body><main class="card" data-code="{{.Code}}">
<h1>{{.Headline}}</h1>
{{if .PortLabel}}<p class="meta"><strong>{{.PortLabel}}</strong> · port <code>{{.Port}}</code></p>{{end}}
<p>{{sentence .Detail | spans}}</p>
{{if .Logs}}<pre class="logs" id="logs">{{range .Logs}}{{.}}
{{end}}</pre>{{end}}
<p class="next"><strong>What to do:</strong> {{.Next}}</p>
<span class="code">{{.Status}} · {{.Code}}</span>
</main></body></html>
`))

// wakingData is what wakingPage renders.
type wakingData struct {
	Nonce     string
	SandboxID string
	Port      int
	PortLabel string
	Status    wakeStatus
	StatusURL string
	First     string // the first step's words
	Why       string // why the app is not up yet, from the first step
}

var wakingPage = template.Must(template.New("waking").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Waking up {{if .PortLabel}}{{.PortLabel}}{{else}}port {{.Port}}{{end}}…</title>
<style>` + pageStyle + `</style></head>
<body><main class="card" id="card" data-step="{{.Status.Step}}">
<h1 id="headline">Waking up your sandbox</h1>
<p class="meta">{{if .SandboxID}}<code>{{.SandboxID}}</code> · {{end}}{{if .PortLabel}}<strong>{{.PortLabel}}</strong> · {{end}}port <code>{{.Port}}</code> · <span class="elapsed" id="elapsed">{{.Status.ElapsedMS}} ms</span></p>
<p>{{.Why}} This page switches to your app by itself the moment port {{.Port}} answers.</p>
<ol class="steps" id="steps">
<li id="s0"><span class="dot"></span><span>{{.First}}</span></li>
<li id="s1"><span class="dot"></span><span id="svc">Starting the dev server</span></li>
<li id="s2"><span class="dot"></span><span>Waiting for port {{.Port}}</span></li>
</ol>
<div id="failed" hidden><pre class="logs" id="logs" hidden></pre><p class="next"><strong>What to do:</strong> <span id="next"></span></p>
<p><button id="retry" type="button">Try again</button></p><span class="code" id="code"></span></div>
</main>
<script nonce="{{.Nonce}}">
(function(){
  var url = {{.StatusURL}}, order = {"starting_sandbox":0,"restoring":0,"starting_service":1,"waiting_for_port":2,"ready":3};
  var next = {"sandbox_ended":"Create a new sandbox and expose the port again.","upstream_unreachable":"Start your dev server on this port, or declare it as a service with its port so it starts after every wake.","sandbox_waking":"Reload to keep waiting, and check the service's logs."};
  var base = Date.now() - {{.Status.ElapsedMS}}, stopped = false, lastIdx = 0;
  // spans sets el's text, each part between backticks as code (as the
  // error pages do).
  function spans(el, text){
    el.textContent = "";
    text.split("\x60").forEach(function(part, i){
      if (i % 2) { var c = document.createElement("code"); c.textContent = part; el.appendChild(c); }
      else el.appendChild(document.createTextNode(part));
    });
  }
  function show(st){
    var idx = order[st.step];
    if (idx === undefined) idx = lastIdx; else lastIdx = idx;
    if (st.service) document.getElementById("svc").textContent = "Starting " + st.service;
    for (var i = 0; i < 3; i++) {
      var li = document.getElementById("s"+i);
      li.className = i < idx ? "done" : (i === idx && st.step !== "failed" ? "now" : (st.step === "failed" && i === idx ? "bad" : ""));
    }
    document.getElementById("card").setAttribute("data-step", st.step);
    if (st.ready) {
      stopped = true;
      document.getElementById("headline").textContent = "Ready: opening your app…";
      location.reload();
      return;
    }
    if (st.step === "failed") {
      stopped = true;
      spans(document.getElementById("headline"), st.detail ? st.detail.charAt(0).toUpperCase() + st.detail.slice(1) : "The sandbox could not be woken");
      spans(document.getElementById("next"), st.next || next[st.code] || "Reload in a few seconds.");
      var logs = document.getElementById("logs");
      logs.textContent = (st.logs || []).join("\n");
      logs.hidden = !(st.logs && st.logs.length);
      document.getElementById("code").textContent = st.code;
      document.getElementById("failed").hidden = false;
    }
  }
  function poll(retry){
    fetch(url + (retry ? "?retry=1" : ""), {credentials:"same-origin", cache:"no-store"})
      .then(function(r){ return r.ok ? r.json() : null; })
      .then(function(st){ if (st) show(st); if (!stopped) setTimeout(poll, 400); })
      .catch(function(){ if (!stopped) setTimeout(poll, 1000); });
  }
  setInterval(function(){ if (!stopped) document.getElementById("elapsed").textContent = ((Date.now()-base)/1000).toFixed(1) + " s"; }, 100);
  document.getElementById("retry").addEventListener("click", function(){
    stopped = false; base = Date.now(); document.getElementById("failed").hidden = true;
    document.getElementById("headline").textContent = "Waking up your sandbox"; poll(true);
  });
  show({{.Status}});
  poll(false);
})();
</script></body></html>
`))

// writeWakingPage answers a browser navigation to a preview that is
// waking. 503 with Retry-After tells caches and crawlers it is
// temporary; what the person sees is the page, not a status text.
func (p *Proxy) writeWakingPage(w http.ResponseWriter, r *http.Request, ws *wakeState) {
	st := ws.status(p.cfg.Now())
	var b [16]byte
	_, _ = rand.Read(b[:])
	nonce := base64.RawStdEncoding.EncodeToString(b[:])
	first, why := wakeWords(st)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Retry-After", strconv.Itoa(2))
	// The page runs only its own script and talks only to its own host.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = wakingPage.Execute(w, wakingData{
		Nonce: nonce, SandboxID: st.SandboxID, Port: ws.port, PortLabel: ws.portLabel, Status: st, StatusURL: wakeStatusPath, First: first, Why: why,
	})
}

// wakeWords names a wake's first step, and says why the app is not up
// yet, from what control said of the sandbox when the wake began. A
// suspended sandbox may have been stopped by its owner as well as
// suspended for idleness, and control does not say which, so the page
// claims neither.
func wakeWords(st wakeStatus) (first, why string) {
	step := stepRestoring
	if len(st.Steps) > 0 {
		step = st.Steps[0].Step
	}
	switch step {
	case stepStarting:
		return "Starting the sandbox", "It is starting for the first time."
	case stepRestoring:
		return "Restoring the workspace", "It was suspended, and its workspace is being restored."
	}
	return "Sandbox running", "The sandbox is running; its app is not answering yet."
}
