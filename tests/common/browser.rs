//! A page in a real browser: Debian's headless `chromium` (installed by
//! `scripts/ci/install-test-deps.sh`) loads a file from `file://` with the network disabled (every
//! host name resolves to nothing and the proxy is a closed port), and gives back
//!
//! - what a probe script saw in the loaded page: every console error or warning, uncaught
//!   exception and Content-Security-Policy violation, each element's box (by `id`), and every
//!   chart's axis labels as laid out (`--dump-dom` of a copy with the probe added);
//! - the console lines Chromium logged for the page itself, unmodified (`--enable-logging`);
//! - a full-page screenshot of the unmodified page, decoded (`--screenshot`).
//!
//! One load takes 1–3 s on a loaded 2-core machine.

use super::e2e::{INSTALL_HINT, run_with_timeout, which};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Chromium's binary; panics (the test fails, it does not skip) naming the install script.
pub fn chromium() -> PathBuf {
    which("chromium").unwrap_or_else(|| {
        panic!("headless Chromium (`chromium` on PATH, Debian package chromium) is missing: {INSTALL_HINT}")
    })
}

/// Records errors from the very start of the page.
const HOOK: &str = r"<script>window.__errs=[];
window.addEventListener('error',function(e){__errs.push('uncaught: '+e.message)});
document.addEventListener('securitypolicyviolation',function(e){__errs.push('csp: '+e.violatedDirective+' '+e.blockedURI)});
['error','warn'].forEach(function(k){var f=console[k];console[k]=function(){__errs.push(k+': '+Array.prototype.join.call(arguments,' '));f.apply(console,arguments)}});
</script>";

/// Runs after the page's own script: boxes, axis labels and errors, as JSON in a `<pre>`.
const PROBE: &str = r"<script>(function(){
function box(el){var r=el.getBoundingClientRect();return [Math.round(r.left+scrollX),Math.round(r.top+scrollY),Math.round(r.width),Math.round(r.height)]}
var boxes={},axes={};
document.querySelectorAll('[id]').forEach(function(el){boxes[el.id]=box(el)});
document.querySelectorAll('figure.plot').forEach(function(f){var s=f.querySelector(':scope>svg');if(s)boxes[f.id+'/svg']=box(s);
var x=f.querySelector('.x-label'),y=f.querySelector('.y-label');
var g=f.querySelector('ul.legend');
axes[f.id]=[x?x.textContent:'',y?y.textContent:'',x?x.getBoundingClientRect().width:0,y?y.getBoundingClientRect().height:0,
 s&&g?g.getBoundingClientRect().top-s.getBoundingClientRect().bottom:-1]});
var sorted={},edges={};
document.querySelectorAll('table.sortable').forEach(function(t){var w=t.parentElement.getBoundingClientRect(),r=t.tBodies[0]&&t.tBodies[0].rows[0];
 if(!r)return;var a=r.cells[0].getBoundingClientRect(),z=r.cells[r.cells.length-1].getBoundingClientRect();
 edges[t.id]=[w.left,w.right,a.left,z.right,t.getBoundingClientRect().width]});
document.querySelectorAll('table.sortable').forEach(function(t){var hs=t.querySelectorAll('thead th');
 for(var i=0;i<hs.length;i++){if(hs[i].textContent.indexOf('TTFT p95')===0){
  var col=function(){return Array.prototype.map.call(t.tBodies[0].rows,function(r){return parseFloat(r.cells[i].getAttribute('data-v'))})};
  var before=col();hs[i].click();var up=col();hs[i].click();var down=col();
  hs[i].click();hs[i].click();hs[i].removeAttribute('data-dir');
  sorted[t.id]=[before,up,down];break;}}});
var p=document.createElement('pre');p.id='browser-probe';
p.textContent=JSON.stringify({boxes:boxes,axes:axes,sorted:sorted,edges:edges,errors:window.__errs,height:document.documentElement.scrollHeight,js:document.documentElement.getAttribute('data-js')});
document.body.appendChild(p);})();</script>";

/// A decoded screenshot (RGBA, 8 bits per channel).
pub struct Shot {
    /// Pixels across.
    pub width: u32,
    /// Pixels down.
    pub height: u32,
    /// RGBA rows.
    pub rgba: Vec<u8>,
}

impl Shot {
    /// The pixel at (x, y).
    pub fn at(&self, x: u32, y: u32) -> [u8; 4] {
        let i = ((y * self.width + x) * 4) as usize;
        [
            self.rgba[i],
            self.rgba[i + 1],
            self.rgba[i + 2],
            self.rgba[i + 3],
        ]
    }

    /// Writes the top `height` rows as a PNG.
    pub fn write_top(&self, path: &Path, height: u32) {
        let h = height.min(self.height);
        let file = std::fs::File::create(path).expect("create the PNG");
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), self.width, h);
        enc.set_color(png::ColorType::Rgba);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::High);
        let mut w = enc.write_header().expect("PNG header");
        w.write_image_data(&self.rgba[..(self.width * h * 4) as usize])
            .expect("PNG data");
    }

    /// In the box `[x, y, w, h]` (clipped to the image): the share of pixels that are not
    /// near-white, and how many pixels are within 40 (per channel) of `rgb`.
    pub fn region(&self, b: [u32; 4], rgb: Option<[u8; 3]>) -> (f64, u64) {
        let (x1, y1) = (
            (b[0] + b[2]).min(self.width),
            (b[1] + b[3]).min(self.height),
        );
        let (mut ink, mut all, mut found) = (0u64, 0u64, 0u64);
        for y in b[1]..y1 {
            for x in b[0]..x1 {
                let p = self.at(x, y);
                all += 1;
                if p[0] < 235 || p[1] < 235 || p[2] < 235 {
                    ink += 1;
                }
                if let Some(c) = rgb
                    && (0..3).all(|i| (i32::from(p[i]) - i32::from(c[i])).abs() <= 40)
                {
                    found += 1;
                }
            }
        }
        (ink as f64 / all.max(1) as f64, found)
    }
}

/// What the browser showed.
pub struct Loaded {
    /// Element boxes by id (`[x, y, w, h]` in CSS pixels = screenshot pixels); a chart's own
    /// `<svg>` is `ID/svg`.
    pub boxes: BTreeMap<String, [u32; 4]>,
    /// Each figure's x and y axis labels, their rendered extents, and the gap from the bottom
    /// of its chart to the top of its legend (negative: the legend overlaps the chart).
    pub axes: BTreeMap<String, (String, String, f64, f64, f64)>,
    /// For each sortable table with a `TTFT p95` column: that column's values as loaded, after
    /// one click on its head, and after a second.
    pub sorted: BTreeMap<String, [Vec<f64>; 3]>,
    /// For each sortable table: its scrolling box's left and right, and where the first body
    /// row's first and last cells are drawn (left of the first, right of the last), and the
    /// table's full width, as laid out at the window's width.
    pub edges: BTreeMap<String, [f64; 5]>,
    /// Console errors and warnings, uncaught exceptions, CSP violations.
    pub errors: Vec<String>,
    /// Console lines Chromium logged while taking the screenshot of the unmodified page.
    pub console: Vec<String>,
    /// The page's own script ran to its end (`<html data-js="ok">`).
    pub js_ok: bool,
    /// The screenshot.
    pub shot: Shot,
}

fn run(args: &[String], profile: &Path) -> (String, String) {
    let mut cmd = Command::new(chromium());
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--force-device-scale-factor=1",
        // No network: nothing resolves, and the proxy is a closed port.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--proxy-server=http://127.0.0.1:9",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(args);
    for v in super::PROXY_ENV_VARS {
        cmd.env_remove(v);
    }
    let (st, out, err) = run_with_timeout(cmd, None, Duration::from_secs(90));
    assert!(st.success(), "chromium {args:?} failed: {st}\n{err}");
    (out, err)
}

/// Loads `page` at `width` CSS pixels, writes the screenshot to `png`, and reads back what
/// the browser showed.
pub fn load(page: &Path, width: u32, png: &Path) -> Loaded {
    let dir = tempfile::tempdir().expect("tempdir");
    let html = std::fs::read_to_string(page).expect("read the page");
    let probed = html
        .replacen("<head>", &format!("<head>{HOOK}"), 1)
        .replacen("</body>", &format!("{PROBE}</body>"), 1);
    assert!(probed.contains("browser-probe"), "no </body> in the page");
    let copy = dir.path().join("probed.html");
    std::fs::write(&copy, probed).expect("write the probed copy");
    let (dom, _) = run(
        &[
            format!("--window-size={width},900"),
            "--dump-dom".into(),
            format!("file://{}", copy.display()),
        ],
        &dir.path().join("profile-dom"),
    );
    let start = dom.find(r#"<pre id="browser-probe">"#).unwrap_or_else(|| {
        panic!(
            "the probe did not run; the DOM:\n{}",
            &dom[..dom.len().min(2000)]
        )
    }) + r#"<pre id="browser-probe">"#.len();
    let end = start + dom[start..].find("</pre>").expect("</pre>");
    let text = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let probe: Value = serde_json::from_str(&text).expect("the probe's JSON");
    let height = probe["height"].as_u64().expect("height") as u32;
    let (_, log) = run(
        &[
            format!("--window-size={width},{}", height.max(100)),
            "--enable-logging=stderr".into(),
            "--v=0".into(),
            format!("--screenshot={}", png.display()),
            format!("file://{}", page.display()),
        ],
        &dir.path().join("profile-shot"),
    );
    let console = log
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_owned)
        .collect();
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png).expect("the screenshot"),
    ));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    let rgba = match info.color_type {
        png::ColorType::Rgba => buf[..info.buffer_size()].to_vec(),
        png::ColorType::Rgb => buf[..info.buffer_size()]
            .chunks(3)
            .flat_map(|c| [c[0], c[1], c[2], 255])
            .collect(),
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    let boxes = probe["boxes"]
        .as_object()
        .expect("boxes")
        .iter()
        .map(|(k, v)| {
            let n = |i: usize| v[i].as_f64().unwrap_or(0.0).max(0.0) as u32;
            (k.clone(), [n(0), n(1), n(2), n(3)])
        })
        .collect();
    let axes = probe["axes"]
        .as_object()
        .expect("axes")
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                (
                    v[0].as_str().unwrap_or("").to_owned(),
                    v[1].as_str().unwrap_or("").to_owned(),
                    v[2].as_f64().unwrap_or(0.0),
                    v[3].as_f64().unwrap_or(0.0),
                    v[4].as_f64().unwrap_or(-1.0),
                ),
            )
        })
        .collect();
    let col = |v: &Value| -> Vec<f64> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|x| x.as_f64().unwrap_or(f64::NAN))
            .collect()
    };
    let sorted = probe["sorted"]
        .as_object()
        .expect("sorted")
        .iter()
        .map(|(k, v)| (k.clone(), [col(&v[0]), col(&v[1]), col(&v[2])]))
        .collect();
    let edges = probe["edges"]
        .as_object()
        .expect("edges")
        .iter()
        .map(|(k, v)| {
            let n = |i: usize| v[i].as_f64().unwrap_or(f64::NAN);
            (k.clone(), [n(0), n(1), n(2), n(3), n(4)])
        })
        .collect();
    Loaded {
        boxes,
        axes,
        sorted,
        edges,
        errors: probe["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .map(|e| e.as_str().unwrap_or("").to_owned())
            .collect(),
        console,
        js_ok: probe["js"] == "ok",
        shot: Shot {
            width: info.width,
            height: info.height,
            rgba,
        },
    }
}
