//! `rnic-trace`: a TraceHal trace (rnic-middleware's JSON lines) as one
//! self-contained HTML page: a sequence diagram with a lane for the
//! application, the driver, the doorbells, the device, the wire and the
//! peer, one row per event, each row opening to its decoded fields and
//! raw bytes.
//!
//! The page carries the events as JSON and draws them with its own
//! script: no network, no other file.

use serde::{Deserialize, Serialize};

/// The lanes, left to right.
pub const LANES: [&str; 6] = ["app", "driver", "doorbell", "device", "wire", "peer"];

/// One event of a trace, as rnic-middleware writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Its order in the trace.
    pub seq: u64,
    /// Nanoseconds since the trace began.
    pub t_ns: u64,
    /// One of [`LANES`].
    pub lane: String,
    /// What it is (`cmd`, `wqe`, `cqe`, `frame`, …).
    pub kind: String,
    /// Its decoded line.
    pub text: String,
    /// Its decoded fields.
    pub fields: Vec<(String, String)>,
    /// Its bytes, in hex.
    pub raw: String,
}

/// Reads a trace: one JSON event per line (blank lines skipped). An error
/// names the line.
pub fn parse(jsonl: &str) -> Result<Vec<TraceEvent>, String> {
    jsonl
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// The page for `events`, titled `title`.
pub fn render(title: &str, events: &[TraceEvent]) -> String {
    // `</` inside the JSON would end its script element early.
    let data = serde_json::to_string(events)
        .unwrap_or_else(|_| "[]".into())
        .replace("</", "<\\/");
    let lanes = serde_json::to_string(&LANES).unwrap_or_default();
    PAGE.replace("{{TITLE}}", &escape(title))
        .replace("{{LANES}}", &lanes)
        .replace("{{DATA}}", &data)
}

/// `s` for HTML text.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const PAGE: &str = r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{TITLE}}</title>
<style>
body { font: 13px/1.35 system-ui, sans-serif; margin: 1em; color: #222; }
h1 { font-size: 16px; }
table { border-collapse: collapse; width: 100%; table-layout: fixed; }
th { position: sticky; top: 0; background: #eee; padding: 4px; border-bottom: 2px solid #999; }
td { vertical-align: top; padding: 2px 4px; border-left: 1px dashed #ccc; }
th.seq, th.t { width: 4.5em; }
td.seq, td.t { color: #777; font-variant-numeric: tabular-nums; border-left: none; }
tr.event:hover { background: #f6f6ff; }
.box { display: block; border-radius: 4px; padding: 2px 5px; font-family: ui-monospace, monospace; font-size: 12px; word-break: break-word; }
.lane-app .box { background: #e8f5e9; } .lane-driver .box { background: #e3f2fd; }
.lane-doorbell .box { background: #fff3e0; } .lane-device .box { background: #fce4ec; }
.lane-wire .box { background: #ede7f6; } .lane-peer .box { background: #eceff1; }
details summary { cursor: pointer; }
.fields td { border: none; padding: 0 6px 0 0; font-size: 11px; }
pre.raw { margin: 2px 0; font-size: 11px; color: #555; }
</style>
</head>
<body>
<h1>{{TITLE}}</h1>
<p id="summary"></p>
<table id="diagram"><thead><tr id="lanes"><th class="seq">#</th><th class="t">t µs</th></tr></thead><tbody></tbody></table>
<script id="trace" type="application/json">{{DATA}}</script>
<script>
"use strict";
const lanes = {{LANES}};
const events = JSON.parse(document.getElementById("trace").textContent);
const head = document.getElementById("lanes");
for (const l of lanes) {
  const th = document.createElement("th");
  th.textContent = l;
  head.appendChild(th);
}
function hexdump(hex) {
  const lines = [];
  for (let i = 0; i < hex.length; i += 32) {
    const bytes = hex.slice(i, i + 32).match(/../g).join(" ");
    lines.push((i / 2).toString(16).padStart(4, "0") + "  " + bytes);
  }
  return lines.join("\n");
}
const body = document.querySelector("#diagram tbody");
for (const e of events) {
  const tr = document.createElement("tr");
  tr.className = "event lane-" + e.lane;
  tr.dataset.lane = e.lane;
  tr.dataset.kind = e.kind;
  const seq = document.createElement("td");
  seq.className = "seq";
  seq.textContent = e.seq;
  const t = document.createElement("td");
  t.className = "t";
  t.textContent = (e.t_ns / 1000).toFixed(1);
  tr.append(seq, t);
  // The event's box starts in its lane and takes the lanes to its right,
  // so that a long line has room.
  const at = lanes.indexOf(e.lane);
  for (const [i, l] of lanes.entries()) {
    if (i > at && at >= 0) break;
    const td = document.createElement("td");
    if (i === at) td.colSpan = lanes.length - at;
    if (l === e.lane) {
      const d = document.createElement("details");
      d.className = "box";
      const s = document.createElement("summary");
      s.textContent = e.text;
      d.appendChild(s);
      const f = document.createElement("table");
      f.className = "fields";
      for (const [k, v] of e.fields.concat([["kind", e.kind]])) {
        const r = f.insertRow();
        r.insertCell().textContent = k;
        r.insertCell().textContent = v;
      }
      d.appendChild(f);
      if (e.raw.length > 0) {
        const pre = document.createElement("pre");
        pre.className = "raw";
        pre.textContent = hexdump(e.raw);
        d.appendChild(pre);
      }
      td.appendChild(d);
    }
    tr.appendChild(td);
  }
  body.appendChild(tr);
}
const counts = {};
for (const e of events) counts[e.lane] = (counts[e.lane] || 0) + 1;
document.getElementById("summary").textContent = events.length + " events: " +
  lanes.filter(l => counts[l]).map(l => l + " " + counts[l]).join(", ");
</script>
</body>
</html>
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_round_trips_and_its_script_cannot_be_closed_by_data() {
        let line = r#"{"seq":0,"t_ns":1500,"lane":"device","kind":"cqe","text":"CQE </script> x","fields":[["cqn","1"]],"raw":"00ff"}"#;
        let ev = parse(&format!("{line}\n\n")).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].fields, [("cqn".to_owned(), "1".to_owned())]);
        let page = render("a <trace>", &ev);
        assert!(page.contains("<title>a &lt;trace&gt;</title>"));
        assert!(page.contains("CQE <\\/script> x"));
        assert_eq!(page.matches("</script>").count(), 2);
        assert!(parse("{").unwrap_err().starts_with("line 1:"));
    }
}
