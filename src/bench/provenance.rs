//! What served a run, recorded without asking (pure; [`collect`] reads it): each target's server
//! and version and the settings its own endpoints state (vLLM `/version`, SGLang
//! `/get_server_info`, TGI `/info`, llama.cpp `/props`), its `/v1/models` (each model's root and
//! `max_model_len`), its GPUs (model, count and driver from the DCGM labels; the count its
//! `gpus:` declares wins), the served model names and fingerprints its answers carried,
//! tokenprobe's version and the client host (cores, kernel). Two runs' records side by side say
//! what changed between them ([`changes`]: "vLLM 0.10.1 → 0.11.0; GPUs 8 → 4"), beside a
//! regression in `--baseline`'s comparison and in `bench history`.
//!
//! Only named fields are read (settings by an allowlist), each value cut to
//! [`MAX_VALUE_CHARS`], URLs shown without userinfo or secret query values, and every value
//! passed through the target's redactor: a key a server echoes never reaches the report.

pub mod collect;

use super::efficiency::GpuCount;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The longest value kept (characters).
pub const MAX_VALUE_CHARS: usize = 200;
/// The most models kept of a `/v1/models` answer, and served names or fingerprints per model.
pub const MAX_LISTED: usize = 16;

/// A server type tokenprobe knows by its own endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerKind {
    /// vLLM (`GET /version`).
    #[serde(rename = "vllm")]
    Vllm,
    /// SGLang (`GET /get_server_info`).
    #[serde(rename = "sglang")]
    Sglang,
    /// Hugging Face TGI (`GET /info`).
    #[serde(rename = "tgi")]
    Tgi,
    /// llama.cpp's server (`GET /props`).
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
}

impl ServerKind {
    /// Its name for people.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Vllm => "vLLM",
            ServerKind::Sglang => "SGLang",
            ServerKind::Tgi => "TGI",
            ServerKind::LlamaCpp => "llama.cpp",
        }
    }
}

/// One model a server lists (`/v1/models`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedModel {
    /// Its id (the name requests send).
    pub id: String,
    /// What it was loaded from (vLLM's and SGLang's `root`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// Its context length (vLLM's `max_model_len`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    /// Its `owned_by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owned_by: Option<String>,
}

/// What answered for one benched model: the served model names and fingerprints its answers
/// carried (at most [`MAX_LISTED`] each).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    /// The model name sent.
    pub model: String,
    /// The `model` the answers named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served_models: Vec<String>,
    /// Their `system_fingerprint`s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fingerprints: Vec<String>,
}

/// The GPUs of a target: their count (declared or from DCGM) and what DCGM's labels say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpus {
    /// How many, and where that number comes from.
    #[serde(flatten)]
    pub count: GpuCount,
    /// The devices DCGM's metrics show (when scraped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcgm_devices: Option<u32>,
    /// Their models (`modelName`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Their driver (`DCGM_FI_DRIVER_VERSION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}

/// What served one target.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// The config's target.
    pub target: String,
    /// Its server type, when one of its own endpoints answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerKind>,
    /// Its version (llama.cpp: its build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The settings its endpoint states (an allowlist per server type).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
    /// The models it lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ListedModel>,
    /// Its GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Gpus>,
    /// What answered each benched model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served: Vec<Served>,
}

/// The client host the run was sent from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientHost {
    /// CPUs this process may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// The kernel's release (Linux's `/proc/sys/kernel/osrelease`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// The OS and architecture (`linux x86_64`).
    pub os: String,
}

/// What served a run and what sent it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// tokenprobe's version.
    pub tokenprobe: String,
    /// The client host.
    pub client: ClientHost,
    /// Each target, in the order its models ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerInfo>,
}

impl Provenance {
    /// The server record of `target`.
    pub fn server(&self, target: &str) -> Option<&ServerInfo> {
        self.servers.iter().find(|s| s.target == target)
    }
}

/// A value for the record: URLs without their secrets, `redact`'s secrets hidden, cut to
/// [`MAX_VALUE_CHARS`], control characters dropped.
pub fn clean(v: &str, redact: &dyn Fn(&str) -> String) -> String {
    let v: String = v.chars().filter(|c| !c.is_control()).collect();
    let v = if v.contains("://") && url::Url::parse(&v).is_ok() {
        crate::redact::redact_url(&v)
    } else {
        v
    };
    crate::units::truncate(&redact(&v), MAX_VALUE_CHARS)
}

/// A JSON scalar as a setting's text (`null`, arrays and objects are none).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn object(body: &[u8]) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(o)) => Some(o),
        _ => None,
    }
}

/// What a server type's endpoint said: its version and settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stated {
    /// The version.
    pub version: Option<String>,
    /// The allowlisted settings (raw; [`clean`] makes them the record's).
    pub settings: BTreeMap<String, String>,
}

/// The settings of each server type that are read (nothing else of its answer is kept: an API
/// key among them never is).
const SGLANG_SETTINGS: [&str; 18] = [
    "model_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "pp_size",
    "ep_size",
    "context_length",
    "max_running_requests",
    "max_total_num_tokens",
    "chunked_prefill_size",
    "mem_fraction_static",
    "kv_cache_dtype",
    "quantization",
    "dtype",
    "attention_backend",
    "schedule_policy",
    "disable_radix_cache",
    "page_size",
];
const TGI_SETTINGS: [&str; 12] = [
    "model_id",
    "model_sha",
    "model_dtype",
    "model_device_type",
    "max_concurrent_requests",
    "max_input_tokens",
    "max_input_length",
    "max_total_tokens",
    "max_batch_total_tokens",
    "max_batch_prefill_tokens",
    "max_batch_size",
    "sha",
];

fn pick(o: &serde_json::Map<String, Value>, keys: &[&str]) -> BTreeMap<String, String> {
    keys.iter()
        .filter_map(|k| Some(((*k).to_owned(), scalar(o.get(*k)?)?)))
        .collect()
}

/// vLLM's `GET /version`: `{"version": "0.11.0"}`.
pub fn parse_vllm(body: &[u8]) -> Option<Stated> {
    let o = object(body)?;
    let v = o.get("version")?.as_str()?;
    Some(Stated {
        version: Some(v.to_owned()),
        settings: BTreeMap::new(),
    })
}

/// SGLang's `GET /get_server_info`: its server arguments (and `version`).
pub fn parse_sglang(body: &[u8]) -> Option<Stated> {
    let o = object(body)?;
    if !(o.contains_key("model_path") || o.contains_key("tp_size")) {
        return None;
    }
    Some(Stated {
        version: o.get("version").and_then(scalar),
        settings: pick(&o, &SGLANG_SETTINGS),
    })
}

/// TGI's `GET /info`: its model, limits and `version`.
pub fn parse_tgi(body: &[u8]) -> Option<Stated> {
    let o = object(body)?;
    if !(o.contains_key("model_id")
        && (o.contains_key("max_total_tokens") || o.contains_key("router")))
    {
        return None;
    }
    Some(Stated {
        version: o.get("version").and_then(scalar),
        settings: pick(&o, &TGI_SETTINGS),
    })
}

/// llama.cpp's `GET /props`: its build (the version), slots, context and model.
pub fn parse_llamacpp(body: &[u8]) -> Option<Stated> {
    let o = object(body)?;
    let gen_settings = o.get("default_generation_settings");
    if gen_settings.is_none() && !o.contains_key("total_slots") {
        return None;
    }
    let mut settings = pick(&o, &["total_slots", "model_path"]);
    if let Some(n) = gen_settings.and_then(|g| g.get("n_ctx")).and_then(scalar) {
        settings.insert("n_ctx".into(), n);
    }
    Some(Stated {
        version: o.get("build_info").and_then(scalar),
        settings,
    })
}

/// `GET /v1/models`: each model's id, root, `max_model_len` and `owned_by` (at most
/// [`MAX_LISTED`]).
pub fn parse_models(body: &[u8]) -> Vec<ListedModel> {
    let Some(o) = object(body) else {
        return Vec::new();
    };
    let Some(data) = o.get("data").and_then(Value::as_array) else {
        return Vec::new();
    };
    data.iter()
        .filter_map(|m| {
            Some(ListedModel {
                id: m.get("id")?.as_str()?.to_owned(),
                root: m.get("root").and_then(Value::as_str).map(str::to_owned),
                max_model_len: m.get("max_model_len").and_then(Value::as_u64),
                owned_by: m.get("owned_by").and_then(Value::as_str).map(str::to_owned),
            })
        })
        .take(MAX_LISTED)
        .collect()
}

/// The answers of a target's endpoints (their bodies; `None`: absent, failed or not 200).
#[derive(Debug, Clone, Default)]
pub struct Answers {
    /// `GET /version`.
    pub version: Option<Vec<u8>>,
    /// `GET /get_server_info`.
    pub server_info: Option<Vec<u8>>,
    /// `GET /info`.
    pub info: Option<Vec<u8>>,
    /// `GET /props`.
    pub props: Option<Vec<u8>>,
    /// `GET <base_url>/models`.
    pub models: Option<Vec<u8>>,
}

/// A target's server record from its endpoints' answers: the server type whose own endpoint
/// answered as that type does (SGLang, TGI, llama.cpp, then vLLM, whose `/version` is the least
/// particular), its version and settings, and the models it lists; every value [`clean`]ed.
pub fn server_info(target: &str, a: &Answers, redact: &dyn Fn(&str) -> String) -> ServerInfo {
    let found = [
        (
            ServerKind::Sglang,
            a.server_info.as_deref().and_then(parse_sglang),
        ),
        (ServerKind::Tgi, a.info.as_deref().and_then(parse_tgi)),
        (
            ServerKind::LlamaCpp,
            a.props.as_deref().and_then(parse_llamacpp),
        ),
        (ServerKind::Vllm, a.version.as_deref().and_then(parse_vllm)),
    ]
    .into_iter()
    .find_map(|(k, s)| Some((k, s?)));
    let mut out = ServerInfo {
        target: target.to_owned(),
        ..ServerInfo::default()
    };
    if let Some((kind, stated)) = found {
        out.server = Some(kind);
        // SGLang answers /version too when its server info has none.
        out.version = stated
            .version
            .or_else(|| a.version.as_deref().and_then(parse_vllm)?.version)
            .map(|v| clean(&v, redact));
        out.settings = stated
            .settings
            .iter()
            .map(|(k, v)| (k.clone(), clean(v, redact)))
            .collect();
    }
    out.models = a
        .models
        .as_deref()
        .map(parse_models)
        .unwrap_or_default()
        .into_iter()
        .map(|m| ListedModel {
            id: clean(&m.id, redact),
            root: m.root.map(|r| clean(&r, redact)),
            max_model_len: m.max_model_len,
            owned_by: m.owned_by.map(|o| clean(&o, redact)),
        })
        .collect();
    out
}

/// The GPUs DCGM's samples show: the devices (endpoint and `gpu` label, else `UUID`), their
/// models and driver: `(devices, models, driver)`; `None` without a DCGM sample.
pub fn dcgm_gpus(
    samples: &[(usize, crate::servermetrics::expo::Reading)],
) -> Option<(u32, Vec<String>, Option<String>)> {
    let mut devices: Vec<(usize, &str)> = Vec::new();
    let mut models: Vec<String> = Vec::new();
    let mut drivers: Vec<String> = Vec::new();
    for (ep, s) in samples
        .iter()
        .filter(|(_, s)| s.name.starts_with("DCGM_FI_"))
    {
        let id = s.label("gpu").or_else(|| s.label("UUID")).unwrap_or("?");
        if !devices.contains(&(*ep, id)) {
            devices.push((*ep, id));
        }
        for (label, into) in [
            ("modelName", &mut models),
            ("DCGM_FI_DRIVER_VERSION", &mut drivers),
        ] {
            if let Some(v) = s.label(label)
                && !into.iter().any(|x| x == v)
                && into.len() < MAX_LISTED
            {
                into.push(v.to_owned());
            }
        }
    }
    (!devices.is_empty()).then(|| {
        (
            u32::try_from(devices.len()).unwrap_or(u32::MAX),
            models,
            (!drivers.is_empty()).then(|| drivers.join(", ")),
        )
    })
}

/// What the client host is: its cores, its kernel, its OS.
pub fn client_host() -> ClientHost {
    ClientHost {
        cores: std::thread::available_parallelism()
            .ok()
            .and_then(|n| u32::try_from(n.get()).ok()),
        kernel: kernel_release(),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
    }
}

/// The kernel's release (Linux), read within 256 bytes.
fn kernel_release() -> Option<String> {
    use std::io::Read as _;
    let mut s = String::new();
    std::fs::File::open("/proc/sys/kernel/osrelease")
        .ok()?
        .take(256)
        .read_to_string(&mut s)
        .ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| crate::units::truncate(s, 64))
}

/// The server and version as a phrase: `vLLM 0.11.0`, `SGLang`, `version 1.2`.
fn server_words(s: &ServerInfo) -> Option<String> {
    match (s.server, &s.version) {
        (Some(k), Some(v)) => Some(format!("{} {v}", k.name())),
        (Some(k), None) => Some(k.name().to_owned()),
        (None, Some(v)) => Some(format!("version {v}")),
        (None, None) => None,
    }
}

fn changed(what: &str, old: Option<String>, new: Option<String>, out: &mut Vec<String>) {
    if old != new {
        let f = |v: Option<String>| v.unwrap_or_else(|| "none".into());
        out.push(format!("{what}{} → {}", f(old), f(new)));
    }
}

/// What changed from `old` to `new`, for people ("vLLM 0.10.1 → 0.11.0", "GPUs 8 → 4", a
/// setting, a model's `max_model_len`, a fingerprint, tokenprobe, the client host), each target
/// named when the run has several; empty when nothing did (or neither recorded it).
pub fn changes(old: &Provenance, new: &Provenance) -> Vec<String> {
    let mut out = Vec::new();
    let several = new.servers.len() > 1;
    for s in &new.servers {
        // The same target, else the only one of each (a renamed target).
        let Some(o) = old
            .server(&s.target)
            .or_else(|| (old.servers.len() == 1 && !several).then(|| &old.servers[0]))
        else {
            continue;
        };
        let mut c = Vec::new();
        match (server_words(o), server_words(s)) {
            (Some(a), Some(b)) if a != b => {
                // `vLLM 0.10.1 → 0.11.0` when only the version moved.
                if o.server == s.server
                    && let (Some(k), Some(v0), Some(v1)) = (s.server, &o.version, &s.version)
                {
                    c.push(format!("{} {v0} → {v1}", k.name()));
                } else {
                    c.push(format!("{a} → {b}"));
                }
            }
            _ => {}
        }
        let count = |g: &Option<Gpus>| g.as_ref().map(|g| g.count.count.to_string());
        changed("GPUs ", count(&o.gpus), count(&s.gpus), &mut c);
        let models = |g: &Option<Gpus>| {
            g.as_ref()
                .map(|g| g.models.join(", "))
                .filter(|m| !m.is_empty())
        };
        if models(&o.gpus).is_some() && models(&s.gpus).is_some() {
            changed("GPU ", models(&o.gpus), models(&s.gpus), &mut c);
        }
        let driver = |g: &Option<Gpus>| g.as_ref().and_then(|g| g.driver.clone());
        if driver(&o.gpus).is_some() && driver(&s.gpus).is_some() {
            changed("driver ", driver(&o.gpus), driver(&s.gpus), &mut c);
        }
        for (k, v) in &s.settings {
            if let Some(v0) = o.settings.get(k)
                && v0 != v
            {
                c.push(format!("{k} {v0} → {v}"));
            }
        }
        for m in &s.models {
            let Some(m0) = o.models.iter().find(|x| x.id == m.id) else {
                continue;
            };
            if m0.root.is_some() && m.root.is_some() {
                changed(
                    &format!("{}: root ", m.id),
                    m0.root.clone(),
                    m.root.clone(),
                    &mut c,
                );
            }
            if m0.max_model_len.is_some() && m.max_model_len.is_some() {
                changed(
                    &format!("{}: max_model_len ", m.id),
                    m0.max_model_len.map(|x| x.to_string()),
                    m.max_model_len.map(|x| x.to_string()),
                    &mut c,
                );
            }
        }
        for sv in &s.served {
            let Some(sv0) = o.served.iter().find(|x| x.model == sv.model) else {
                continue;
            };
            let list = |v: &[String]| (!v.is_empty()).then(|| v.join(", "));
            if !sv0.served_models.is_empty() && !sv.served_models.is_empty() {
                changed(
                    &format!("{}: served as ", sv.model),
                    list(&sv0.served_models),
                    list(&sv.served_models),
                    &mut c,
                );
            }
            if !sv0.fingerprints.is_empty() && !sv.fingerprints.is_empty() {
                changed(
                    &format!("{}: fingerprint ", sv.model),
                    list(&sv0.fingerprints),
                    list(&sv.fingerprints),
                    &mut c,
                );
            }
        }
        if several {
            c = c
                .into_iter()
                .map(|x| format!("{}: {x}", s.target))
                .collect();
        }
        out.extend(c);
    }
    if !old.tokenprobe.is_empty() {
        changed(
            "tokenprobe ",
            Some(old.tokenprobe.clone()),
            Some(new.tokenprobe.clone()),
            &mut out,
        );
    }
    let cores = |h: &ClientHost| h.cores.map(|c| c.to_string());
    if old.client.cores.is_some() {
        changed(
            "client cores ",
            cores(&old.client),
            cores(&new.client),
            &mut out,
        );
    }
    if old.client.kernel.is_some() && new.client.kernel.is_some() {
        changed(
            "client kernel ",
            old.client.kernel.clone(),
            new.client.kernel.clone(),
            &mut out,
        );
    }
    out
}

/// The served model names and fingerprints of each (target, model), gathered from every finished
/// level's samples (a [`super::LevelSink`], so the report need not keep them).
#[derive(Debug, Default)]
pub struct ServedTally {
    seen: std::sync::Mutex<BTreeMap<(String, String), Served>>,
}

impl ServedTally {
    /// A tally that `sinks` hand every finished level to.
    pub fn sink(sinks: &mut Vec<std::sync::Arc<dyn super::LevelSink>>) -> std::sync::Arc<Self> {
        let t = std::sync::Arc::new(ServedTally::default());
        sinks.push(t.clone());
        t
    }

    /// Each target's benched models, what answered them.
    pub fn served(&self, target: &str) -> Vec<Served> {
        self.seen
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|((t, _), _)| t == target)
                    .map(|(_, s)| s.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl super::LevelSink for ServedTally {
    fn level_done(&self, model: &super::report::ModelReport, level: &super::stats::LevelStats) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        let key = (
            model.target.clone().unwrap_or_default(),
            model.model.clone(),
        );
        let entry = seen.entry(key).or_insert_with(|| Served {
            model: model.model.clone(),
            ..Served::default()
        });
        let add = |into: &mut Vec<String>, v: Option<&String>| {
            if let Some(v) = v.map(|v| crate::units::truncate(v, MAX_VALUE_CHARS))
                && into.len() < MAX_LISTED
                && !into.contains(&v)
            {
                into.push(v);
            }
        };
        for s in level.samples.iter().flatten() {
            add(&mut entry.served_models, s.served_model.as_ref());
            add(&mut entry.fingerprints, s.system_fingerprint.as_ref());
        }
    }
}

#[cfg(test)]
mod tests;
