//! What answered, as series (docs/metrics.md, "What answered"): the served model and fingerprint
//! of each job as an info series, their changes, another model's answers by the model that gave
//! them, the usage audits and their last ratio, drifts of a deterministic answer, the content
//! checks.
//!
//! A served model or fingerprint is a string the server chose, so as a label value it is bounded
//! (shared case 36): a job keeps the first `MAX_LABEL_VALUES` (8) distinct values of each, cut
//! to `MAX_LABEL_CHARS` (64) characters; any later one is `other`, counted in
//! `tokenprobe_unexpected_label_values_total{field}`. A hostile server that names a new model on
//! every probe adds at most that many series per job, whatever it sends
//! ([`crate::measure::answered::bounded`]).

use super::{JobLabels, Remover, handle};
use crate::measure::ProbeResult;
use crate::measure::answered::bounded;
use crate::outcome::Flag;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServedLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    served_model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    served_model: String,
    system_fingerprint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FieldLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    field: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriftLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    from_fingerprint: String,
    to_fingerprint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    #[prometheus(flatten)]
    job: JobLabels,
    count: &'static str,
}

/// The families of what answered, one set per registry.
#[derive(Debug, Clone, Default)]
pub(super) struct Families {
    mismatch: Family<ServedLabels, Counter>,
    unexpected: Family<FieldLabels, Counter>,
    info: Family<InfoLabels, Gauge>,
    changes: Family<FieldLabels, Counter>,
    drift: Family<DriftLabels, Counter>,
    audits: Family<ResultLabels, Counter>,
    ratio: Family<DirectionLabels, Gauge<f64, AtomicU64>>,
    checks: Family<ResultLabels, Counter>,
}

impl Families {
    /// Registers every family.
    pub(super) fn register(&self, r: &mut Registry) {
        r.register("model_mismatch", "Probes answered by another model than the one asked for (after the aliasing every vendor does and the target's model_aliases), by the model that answered (served_model: a job's first 8 distinct values, then other)", self.mismatch.clone());
        r.register("unexpected_label_values", "Values a server chose (field: served_model, system_fingerprint) past a job's first 8 distinct ones, shown as other in the labels", self.unexpected.clone());
        r.register("served_model_info", "What answered the job's last probe that said: its served model and system fingerprint (each bounded: a job's first 8 distinct values, then other); always 1, one series per job, so a change is a new series", self.info.clone());
        r.register("served_changes", "Changes of what answered between a job's probes that said (field: served_model or system_fingerprint)", self.changes.clone());
        r.register("answer_drift", "Answers of a drift: true prompt that differ from the last of the same served model and fingerprint, else from the last answer, by the fingerprint before and after (bounded like served_model_info)", self.drift.clone());
        r.register("usage_audits", "Usage audits of successful probes by result: within (the stated tokens agree with those streamed, and with the prompt's known length, within the target's tolerance), mismatch (they do not: usage_mismatch), unconfirmed (the output was off, the answer audited before it was not: not flagged, as a server may generate tokens it never streams now and then), no_usage (the answer stated none), no_count (nothing counted the stream: no tokenizer, one token per event neither declared nor learned yet)", self.audits.clone());
        r.register("usage_ratio", "The last audited ratio of stated to counted tokens, by count (output: against the streamed tokens; input: against the prompt's known length); 1 is honest", self.ratio.clone());
        r.register("expect_checks", "Content checks (expect:) of probes that reached them, by result (passed, failed: validation_failed); only jobs whose prompt has one have these series", self.checks.clone());
    }
}

/// A job's state of what answered: the label values it keeps, the last served model and
/// fingerprint, its info series.
#[derive(Debug, Default)]
pub(super) struct State {
    models: Vec<String>,
    fingerprints: Vec<String>,
    last: Option<(Option<String>, Option<String>)>,
    info: Option<InfoLabels>,
    /// Whether the change counters, the audit results and the checks' series exist.
    changes_made: bool,
    audit_results: Vec<&'static str>,
    checks_made: bool,
    ratios: Vec<&'static str>,
    /// The keys of the series made on demand (bounded: their label values are).
    made: std::collections::HashSet<String>,
}

/// Whether `key` is new to `made` (and now in it): the series it names is to be made.
fn made(made: &mut std::collections::HashSet<String>, key: String) -> bool {
    made.insert(key)
}

/// One job's side of [`Families`].
#[derive(Debug)]
pub(super) struct Series {
    labels: JobLabels,
    f: Families,
}

impl Series {
    pub(super) fn new(labels: JobLabels, f: &Families) -> Self {
        Series {
            labels,
            f: f.clone(),
        }
    }

    /// A label value of `field` bounded by the job's `seen` values; an unexpected one counted.
    fn label(
        &self,
        rm: &mut Vec<Remover>,
        (seen, made_keys): (&mut Vec<String>, &mut std::collections::HashSet<String>),
        field: &'static str,
        v: Option<&str>,
    ) -> String {
        let Some(v) = v else {
            return String::new();
        };
        let (label, unexpected) = bounded(seen, v);
        if unexpected {
            let l = FieldLabels {
                job: self.labels.clone(),
                field,
            };
            if made(made_keys, format!("unexpected {field}")) {
                let _ = handle(rm, &self.f.unexpected, l.clone());
            }
            self.f.unexpected.get_or_create(&l).inc();
        }
        label
    }

    /// Removes the job's info series (the job's other series go with its removers).
    pub(super) fn remove(&self, st: &mut State) {
        if let Some(old) = st.info.take() {
            self.f.info.remove(&old);
        }
    }

    /// Records what one probe's result says of what answered.
    pub(super) fn record(&self, r: &ProbeResult, st: &mut State, rm: &mut Vec<Remover>) {
        let (served, fp) = (r.served_model.as_deref(), r.system_fingerprint.as_deref());
        let model = self.label(rm, (&mut st.models, &mut st.made), "served_model", served);
        let fingerprint = self.label(
            rm,
            (&mut st.fingerprints, &mut st.made),
            "system_fingerprint",
            fp,
        );
        if served.is_some() || fp.is_some() {
            self.identity(r, st, rm, (model.clone(), fingerprint));
        }
        if r.flags.contains(&Flag::ModelMismatch) {
            let l = ServedLabels {
                job: self.labels.clone(),
                served_model: model,
            };
            if made(&mut st.made, format!("mismatch {}", l.served_model)) {
                let _ = handle(rm, &self.f.mismatch, l.clone());
            }
            self.f.mismatch.get_or_create(&l).inc();
        }
        if let Some(d) = &r.drift {
            let mut label = |v: Option<&str>| {
                self.label(
                    rm,
                    (&mut st.fingerprints, &mut st.made),
                    "system_fingerprint",
                    v,
                )
            };
            let l = DriftLabels {
                job: self.labels.clone(),
                from_fingerprint: label(d.from.system_fingerprint.as_deref()),
                to_fingerprint: label(d.to.system_fingerprint.as_deref()),
            };
            let key = format!("drift {:?} {:?}", l.from_fingerprint, l.to_fingerprint);
            if made(&mut st.made, key) {
                let _ = handle(rm, &self.f.drift, l.clone());
            }
            self.f.drift.get_or_create(&l).inc();
        }
        if let Some(a) = &r.usage_audit {
            let result = a.result();
            // The two results an alert reads exist together from the first audit.
            for res in ["within", "mismatch", result] {
                if !st.audit_results.contains(&res) {
                    st.audit_results.push(res);
                    let _ = handle(rm, &self.f.audits, self.result(res));
                }
            }
            self.f.audits.get_or_create(&self.result(result)).inc();
            for (count, check) in [("output", &a.output), ("input", &a.input)] {
                let Some(ratio) = check.and_then(|c| c.ratio) else {
                    continue;
                };
                let l = DirectionLabels {
                    job: self.labels.clone(),
                    count,
                };
                if !st.ratios.contains(&count) {
                    st.ratios.push(count);
                    let _ = handle(rm, &self.f.ratio, l.clone());
                }
                self.f.ratio.get_or_create(&l).set(ratio);
            }
        }
        if let Some(passed) = r.expect_passed {
            if !st.checks_made {
                st.checks_made = true;
                for res in ["passed", "failed"] {
                    let _ = handle(rm, &self.f.checks, self.result(res));
                }
            }
            let res = if passed { "passed" } else { "failed" };
            self.f.checks.get_or_create(&self.result(res)).inc();
        }
    }

    fn result(&self, result: &'static str) -> ResultLabels {
        ResultLabels {
            job: self.labels.clone(),
            result,
        }
    }

    /// The info series follows what answered; a change of either is counted.
    fn identity(
        &self,
        r: &ProbeResult,
        st: &mut State,
        rm: &mut Vec<Remover>,
        (served_model, system_fingerprint): (String, String),
    ) {
        let field = |field| FieldLabels {
            job: self.labels.clone(),
            field,
        };
        if !st.changes_made {
            st.changes_made = true;
            for f in ["served_model", "system_fingerprint"] {
                let _ = handle(rm, &self.f.changes, field(f));
            }
        }
        let now = (r.served_model.clone(), r.system_fingerprint.clone());
        if let Some((model, fp)) = &st.last {
            if *model != now.0 {
                self.f.changes.get_or_create(&field("served_model")).inc();
            }
            if *fp != now.1 {
                self.f
                    .changes
                    .get_or_create(&field("system_fingerprint"))
                    .inc();
            }
        }
        st.last = Some(now);
        let info = InfoLabels {
            job: self.labels.clone(),
            served_model,
            system_fingerprint,
        };
        if st.info.as_ref() != Some(&info) {
            if let Some(old) = st.info.take() {
                self.f.info.remove(&old);
            }
            self.f.info.get_or_create(&info).set(1);
            st.info = Some(info);
        }
    }
}
