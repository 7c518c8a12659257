//! What a baseline must share with the run compared with it (pure): the same effective workload
//! (API, prompt and what it sends, output cap, how load is generated) and at least one (model,
//! level) in common. A baseline that differs is refused, naming what differs, rather than
//! compared: its figures are another workload's, or there is nothing to compare.

use super::report::{Apis, LoadMode, Report};
use super::stats::LevelKey;
use crate::probe::ProbeSpec;
use crate::workload::Workload;

/// A run's effective workload, as its report records it: the parts a baseline must share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadKey {
    /// The API (`openai-chat`, ...).
    pub api: Apis,
    /// The prompt's name.
    pub prompt: String,
    /// What the prompt sends ([`describe`]); absent in reports of older versions.
    pub workload: Option<String>,
    /// The output cap.
    pub max_tokens: Option<u32>,
    /// How load is generated ([`load_words`]).
    pub load: String,
}

impl WorkloadKey {
    /// The workload `r` records.
    pub fn of(r: &Report) -> Self {
        WorkloadKey {
            api: r.api.clone(),
            prompt: r.prompt.clone(),
            workload: r.workload.clone(),
            max_tokens: r.max_tokens,
            load: load_words(&r.mode),
        }
    }

    /// What differs between this run's workload and `baseline`'s, each as `what: this run's,
    /// the baseline's`; empty when they are the same. A part one of them does not record (an
    /// older report's) is not compared.
    pub fn differences(&self, baseline: &Self) -> Vec<String> {
        let cap = |c: Option<u32>| c.map_or_else(|| "none".to_owned(), |n| n.to_string());
        let mut out = Vec::new();
        let mut differ = |what: &str, this: &str, that: &str| {
            if this != that {
                out.push(format!("{what} {this} here, {that} in the baseline"));
            }
        };
        differ("api", &self.api.to_string(), &baseline.api.to_string());
        differ("prompt", &self.prompt, &baseline.prompt);
        if let (Some(a), Some(b)) = (&self.workload, &baseline.workload) {
            differ("workload", a, b);
        }
        differ(
            "max_tokens",
            &cap(self.max_tokens),
            &cap(baseline.max_tokens),
        );
        differ("load", &self.load, &baseline.load);
        out
    }
}

/// How a run generated load, in words (what of [`LoadMode`] changes the work a level does, not
/// how much of it is measured): closed or open loop, the arrivals and their burstiness, a
/// ramp-up, a replayed trace's window.
pub fn load_words(m: &LoadMode) -> String {
    let mut w = format!("{} loop", m.kind.as_str());
    if let Some(a) = &m.arrival {
        w.push_str(&format!(", {a} arrivals"));
    }
    if let Some(k) = m.burstiness {
        w.push_str(&format!(" (burstiness {k})"));
    }
    if let Some(r) = &m.ramp_up {
        w.push_str(&format!(", ramp-up {r}"));
    }
    if let Some(t) = &m.trace {
        w.push_str(&format!(
            ", trace {} {} at time scale {} from {} s{}{}",
            t.format.as_str(),
            t.file,
            t.time_scale,
            t.start_s,
            t.duration_s
                .map_or_else(String::new, |d| format!(" for {d} s")),
            t.model
                .as_ref()
                .map_or_else(String::new, |m| format!(", model {m}"))
        ));
    }
    w
}

/// What `spec`'s prompt sends, in words: its kind and lengths (a `messages` prompt by a hash of
/// its messages, a dataset by its file's name, format, order and size), and whether it adds a
/// nonce or is not streamed. Seeds are left out: they choose the draws, not the workload.
pub fn describe(spec: &ProbeSpec) -> String {
    let mut w = match &spec.workload {
        Workload::Messages(msgs) => {
            let parts: Vec<&str> = msgs
                .iter()
                .flat_map(|m| [m.role.as_str(), m.content.as_str()])
                .collect();
            format!(
                "messages {} (hash {})",
                msgs.len(),
                super::shard::fingerprint(&parts)
            )
        }
        Workload::Synthetic(s) => format!(
            "synthetic: input {} tokens, output {} tokens, shared prefix {}",
            s.input_tokens, s.output_tokens, s.shared_prefix_tokens
        ),
        Workload::Dataset(d) => format!(
            "dataset {}: {:?}, {:?} order, {} conversations",
            d.file.file_name().map_or_else(
                || d.file.display().to_string(),
                |n| n.to_string_lossy().into()
            ),
            d.format,
            d.order,
            d.entries.get().map_or(0, Vec::len)
        )
        .to_lowercase(),
        Workload::Conversation(c) => format!(
            "conversation: {} turns, think time {} ms, user {} tokens, output {} tokens",
            c.turns,
            c.think_time.as_millis(),
            c.user_tokens,
            c.output_tokens
        ),
        Workload::Trace(_) => "trace".to_owned(),
        Workload::Session(s) => s.describe(),
    };
    if spec.prompt.nonce {
        w.push_str(", nonce");
    }
    if spec.cache_bust {
        w.push_str(", cache busted");
    }
    if !spec.stream {
        w.push_str(", not streamed");
    }
    w
}

/// The prompts' descriptions, as a report records them (one prompt's, or each one's joined by
/// ` | `).
pub fn describe_all(prompts: &[ProbeSpec]) -> String {
    prompts.iter().map(describe).collect::<Vec<_>>().join(" | ")
}

/// What a baseline must share with the run compared with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The run's (target, model) pairs.
    pub models: Vec<(String, String)>,
    /// Its workload.
    pub workload: WorkloadKey,
    /// Open loop (arrival rates) rather than closed (workers): which stored runs `--baseline
    /// last` looks at (the load is also part of [`WorkloadKey`]).
    pub open_loop: bool,
    /// Its levels; `None` when they are not known before the run (a capacity search's), so that
    /// only the comparison can tell.
    pub levels: Option<Vec<LevelKey>>,
}

impl Fit {
    /// Why `baseline` is not this run's baseline: the workload parts that differ, or no (model,
    /// level) in common (matched as the comparison matches them); `None` when it is.
    pub fn misfit(&self, baseline: &Report) -> Option<String> {
        let differ = self.workload.differences(&WorkloadKey::of(baseline));
        if !differ.is_empty() {
            return Some(format!("another workload ({})", differ.join("; ")));
        }
        let levels = self.levels.as_ref()?;
        let shared = baseline.models.iter().any(|bm| {
            self.models.iter().any(|(t, m)| {
                *m == bm.model
                    && bm.target.as_ref().is_none_or(|bt| bt == t)
                    && bm
                        .levels
                        .iter()
                        .any(|bl| levels.iter().any(|l| l.same(&bl.key)))
            })
        });
        if shared {
            return None;
        }
        let labels = |ls: &mut dyn Iterator<Item = &LevelKey>| {
            let mut v: Vec<&LevelKey> = ls.collect();
            v.sort_by(|a, b| a.x().total_cmp(&b.x()));
            let mut v: Vec<String> = v.into_iter().map(LevelKey::label).collect();
            v.dedup();
            v.join(", ")
        };
        Some(format!(
            "no (model, level) in common, nothing to compare (its levels {} of {}; this run's {} of {})",
            labels(
                &mut baseline
                    .models
                    .iter()
                    .flat_map(|m| &m.levels)
                    .map(|l| &l.key)
            ),
            baseline
                .models
                .iter()
                .map(|m| m.model.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            labels(&mut levels.iter()),
            self.models
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::tests::synthetic;

    fn fit(r: &Report) -> Fit {
        Fit {
            models: vec![("local".into(), "alpha".into())],
            workload: WorkloadKey::of(r),
            open_loop: false,
            levels: Some(vec![LevelKey {
                concurrency: 4,
                rate: None,
            }]),
        }
    }

    /// Issue 39 item 5: a baseline of another output cap, API, prompt, workload or load is named
    /// as such, every part that differs; the same workload with a level in common fits.
    #[test]
    fn a_baseline_of_another_workload_is_named_with_what_differs() {
        let base = synthetic();
        let f = fit(&base);
        assert_eq!(f.misfit(&base), None);
        let mut other = base.clone();
        other.max_tokens = Some(4);
        let mut f8 = f.clone();
        f8.workload.max_tokens = Some(8);
        assert_eq!(
            f8.misfit(&other).as_deref(),
            Some("another workload (max_tokens 8 here, 4 in the baseline)")
        );
        other.api = Apis::one(crate::protocol::Api::AnthropicMessages);
        other.mode.kind = crate::bench::report::LoadKind::Open;
        other.mode.arrival = Some("poisson".into());
        other.workload = Some("synthetic: input 128 tokens".into());
        let m = f8.misfit(&other).unwrap();
        for part in [
            "api openai-chat here, anthropic-messages in the baseline",
            "max_tokens 8 here, 4 in the baseline",
            "load closed loop here, open loop, poisson arrivals in the baseline",
        ] {
            assert!(m.contains(part), "{part}: {m}");
        }
        // This run's workload is recorded, the older report's is not: that part is not compared.
        assert!(!m.contains("workload synthetic"), "{m}");
        let mut described = f.clone();
        described.workload.workload = Some("messages 1 (hash 0)".into());
        assert_eq!(described.misfit(&base), None);
        other.workload = Some("messages 2 (hash 1)".into());
        other.api.clone_from(&base.api);
        other.mode = base.mode.clone();
        other.max_tokens = base.max_tokens;
        assert_eq!(
            described.misfit(&other).as_deref(),
            Some(
                "another workload (workload messages 1 (hash 0) here, messages 2 (hash 1) in the baseline)"
            )
        );
    }

    fn spec(prompt: &str) -> ProbeSpec {
        let c = crate::config::Config::parse(&format!(
            "prompts:\n  - name: p\n    {prompt}\ntargets:\n  - name: t\n    base_url: http://127.0.0.1:1/v1\n    models: [m]\n"
        ))
        .unwrap();
        ProbeSpec::from_job(&c.jobs[0])
    }

    /// What a prompt sends, in words: its lengths, its messages by hash; not its seed, so runs
    /// of one config with fresh filler each compare, and a changed length does not.
    #[test]
    fn a_prompt_is_described_by_what_it_sends_not_its_seed() {
        let mixed = "synthetic:\n      input_tokens: {distribution: normal, mean: 1000, stddev: 200, min: 100, max: 4000}\n      output_tokens: {distribution: uniform, min: 64, max: 256}\n      shared_prefix_tokens: 64";
        let s = spec(mixed);
        assert_eq!(
            describe(&s),
            "synthetic: input normal 1000±200 in 100-4000 tokens, output uniform 64-256 tokens, shared prefix 64"
        );
        let mut fresh = s.clone();
        fresh.workload = s.workload.with_seeds(99);
        assert_eq!(describe(&fresh), describe(&s), "a fresh seed");
        assert_eq!(
            describe(&spec(&format!("{mixed}\n      seed: 7"))),
            describe(&s)
        );
        assert_ne!(
            describe(&spec(&mixed.replace("max: 256", "max: 128"))),
            describe(&s)
        );
        let hi = describe(&spec("messages: [{role: user, content: hi}]"));
        assert!(hi.starts_with("messages 1 (hash "), "{hi}");
        assert_ne!(hi, describe(&spec("messages: [{role: user, content: yo}]")));
        let nonce = describe(&spec(
            "messages: [{role: user, content: hi}]\n    nonce: true",
        ));
        assert_eq!(nonce, format!("{hi}, nonce"));
    }

    /// A baseline with no (model, level) of this run's: refused before sending, naming both
    /// sides' levels; when the levels are not known yet (a search), only the workload is checked.
    #[test]
    fn a_baseline_with_no_level_in_common_does_not_fit() {
        let base = synthetic();
        let mut f = fit(&base);
        f.levels = Some(vec![LevelKey {
            concurrency: 16,
            rate: None,
        }]);
        let m = f.misfit(&base).unwrap();
        assert!(
            m.starts_with("no (model, level) in common, nothing to compare (its levels 2, 4, 8"),
            "{m}"
        );
        assert!(m.contains("this run's 16 of alpha"), "{m}");
        f.models = vec![("local".into(), "gamma".into())];
        f.levels = Some(vec![LevelKey {
            concurrency: 4,
            rate: None,
        }]);
        assert!(f.misfit(&base).is_some(), "another model's level 4");
        f.models = vec![("elsewhere".into(), "alpha".into())];
        assert!(f.misfit(&base).is_some(), "the model at another target");
        f.levels = None;
        assert_eq!(f.misfit(&base), None);
    }
}
