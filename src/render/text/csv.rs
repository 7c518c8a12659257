//! The report as CSV (pure): one row per model and level, every statistic of every metric
//! (seconds, tokens/s), the cross-checks' and the server's columns when the run has them.

use super::{columns::is_knee, crosscheck, efficiency, served, server_view};
use crate::bench::report::Report;

const CSV_SUMMARIES: [&str; 12] = [
    "ttft",
    "ttfo",
    "tpot",
    "e2e",
    "tps",
    "lag",
    "loop_lag",
    "read_lag",
    "ttft_from_schedule",
    "e2e_from_schedule",
    "send_lag",
    "wire_ttft",
];

/// CSV: one row per model and level; every statistic of every metric (seconds, tokens/s).
///
/// # Errors
/// Only if the CSV writer fails (it writes to memory).
pub fn render(r: &Report) -> Result<String, ::csv::Error> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let mut header = level_header();
    header.extend(served::csv_header(r));
    let cross_check = crosscheck::any(r);
    if cross_check {
        header.extend(crosscheck::CSV_HEADER.map(str::to_owned));
    }
    header.extend(super::session::csv_header(r));
    let spend = efficiency::csv_columns(r, &mut header);
    let server_cols = server_view::csv_header(r);
    header.extend(server_cols.iter().cloned());
    w.write_record(&header)?;
    let num = |v: f64| format!("{v}");
    for m in &r.models {
        for (i, l) in m.levels.iter().enumerate() {
            let errors: Vec<String> = l.errors.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let att = l.slo_attainment.as_ref();
            let interval = att.and_then(|a| a.interval);
            let mut row = vec![
                m.model.clone(),
                m.target.clone().unwrap_or_default(),
                l.key.concurrency.to_string(),
                l.key.rate.map(num).unwrap_or_default(),
                l.requests.to_string(),
                l.successes.to_string(),
                num(l.error_rate),
                errors.join(";"),
                l.output_tokens.to_string(),
                num(l.wall_s),
                num(l.output_tokens_per_s),
                num(l.requests_per_s),
                l.goodput_rps.map(num).unwrap_or_default(),
                l.goodput_tokens_per_s.map(num).unwrap_or_default(),
                att.map(|a| num(a.share)).unwrap_or_default(),
                interval.map(|i| num(i[0])).unwrap_or_default(),
                interval.map(|i| num(i[1])).unwrap_or_default(),
                l.cost_per_request.map(num).unwrap_or_default(),
                l.cost_per_mtok.map(num).unwrap_or_default(),
                l.capped.to_string(),
                l.ramp_s.map(num).unwrap_or_default(),
                is_knee(m, i).to_string(),
                l.client_bound.clone().unwrap_or_default(),
                l.stopped
                    .as_ref()
                    .map(|s| s.reason.clone())
                    .unwrap_or_default(),
            ];
            for s in [
                &l.ttft_s,
                &l.ttfo_s,
                &l.tpot_s,
                &l.e2e_s,
                &l.decode_tokens_per_s,
                &l.lag_s,
                &l.loop_lag_s,
                &l.read_lag_s,
                &l.ttft_from_schedule_s,
                &l.e2e_from_schedule_s,
                &l.send_lag_s,
                &l.wire_ttft_s,
            ] {
                match s {
                    Some(s) => row.extend([s.mean, s.p50, s.p90, s.p95, s.p99, s.max].map(num)),
                    None => row.extend(std::iter::repeat_n(String::new(), 6)),
                }
            }
            let st = l.steady_state.as_ref();
            row.extend([
                st.map(|s| num(s.start_s)).unwrap_or_default(),
                st.map(|s| num(s.end_s)).unwrap_or_default(),
                st.map(|s| s.requests.to_string()).unwrap_or_default(),
                st.map(|s| s.before.to_string()).unwrap_or_default(),
                st.map(|s| s.after.to_string()).unwrap_or_default(),
                st.map(|s| num(s.output_tokens_per_s)).unwrap_or_default(),
                st.map(|s| num(s.requests_per_s)).unwrap_or_default(),
                m.prompt.clone().unwrap_or_else(|| r.prompt.clone()),
                l.lengths
                    .requested_input_tokens_mean
                    .map(num)
                    .unwrap_or_default(),
                l.lengths.input_tokens_mean.map(num).unwrap_or_default(),
                l.lengths
                    .requested_output_tokens_mean
                    .map(num)
                    .unwrap_or_default(),
                l.lengths.output_tokens_mean.map(num).unwrap_or_default(),
                l.lengths.input_length_off.to_string(),
            ]);
            row.extend(served::csv_cells(r, l));
            if cross_check {
                row.extend(crosscheck::csv_cells(l.cross_check.as_ref()));
            }
            row.extend(super::session::csv_row(r, l));
            row.extend(efficiency::csv_cells(spend, m, l));
            row.extend(server_view::csv_cells(&server_cols, l));
            w.write_record(&row)?;
        }
    }
    let bytes = w
        .into_inner()
        .map_err(|e| ::csv::Error::from(e.into_error()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The columns every level has, before those a run adds (what answered, cross-checks, sessions,
/// the server's view).
fn level_header() -> Vec<String> {
    let mut header: Vec<String> = [
        "model",
        "target",
        "concurrency",
        "rate",
        "requests",
        "successes",
        "error_rate",
        "errors",
        "output_tokens",
        "wall_s",
        "agg_tps",
        "rps",
        "goodput_rps",
        "goodput_tokens_per_s",
        "slo_attainment",
        "slo_attainment_lo",
        "slo_attainment_hi",
        "cost_per_request",
        "cost_per_mtok",
        "capped",
        "ramp_s",
        "knee",
        "client_bound",
        "partial",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for m in CSV_SUMMARIES {
        for st in ["mean", "p50", "p90", "p95", "p99", "max"] {
            let unit = if matches!(m, "tps") { "" } else { "_s" };
            header.push(format!("{m}_{st}{unit}"));
        }
    }
    header.extend(
        [
            "steady_start_s",
            "steady_end_s",
            "steady_requests",
            "steady_before",
            "steady_after",
            "steady_output_tokens_per_s",
            "steady_requests_per_s",
            "prompt",
            "requested_input_tokens_mean",
            "input_tokens_mean",
            "requested_output_tokens_mean",
            "output_tokens_mean",
            "input_length_off",
        ]
        .map(str::to_owned),
    );
    header
}
