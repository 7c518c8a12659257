//! The energy a level took (pure, time passed in): from the DCGM energy counter of every GPU
//! (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ since the driver loaded), else from their power
//! (`DCGM_FI_DEV_POWER_USAGE`, W) times the level's wall time, else, for a CPU server, from
//! node_exporter's RAPL counters (`node_rapl_package_joules_total` and `..._dram_...`).
//!
//! A counter is read per device (its endpoint and its `gpu` label; a RAPL zone by its `index`),
//! never as a sum per scrape, so a GPU that one scrape lacks neither lowers nor raises the
//! figure. The delta is taken from the scrape right before the level to the one right after,
//! and scaled to the level's wall time (the mean power between those scrapes × the wall time):
//! the energy of the idle moments around the level is not the level's. A counter that fell (a
//! reset, a RAPL wrap) or a device missing from the scrape before or after the level makes the
//! counter unusable for that level: it is said, and the power × time estimate is used when the
//! power gauges are there, else the level has no energy figure. Never a negative or an inflated
//! one.

use super::expo::Reading;
use super::level::{ENDPOINT_LABEL, Phase, Snapshot};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// DCGM's energy counter: mJ since the driver loaded, per GPU.
pub const DCGM_ENERGY: &str = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";
/// DCGM's power draw: W, per GPU.
pub const DCGM_POWER: &str = "DCGM_FI_DEV_POWER_USAGE";
/// node_exporter's RAPL counters (J) summed for a CPU server: the packages (their cores and
/// uncore within) and the DRAM.
pub const RAPL: [&str; 2] = [
    "node_rapl_package_joules_total",
    "node_rapl_dram_joules_total",
];

/// Every sample name the energy reads (what a collector keeps of a scrape besides the signals).
pub const SAMPLE_NAMES: [&str; 4] = [DCGM_ENERGY, DCGM_POWER, RAPL[0], RAPL[1]];

/// Where a level's energy figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// The delta of DCGM's energy counter, summed over the GPUs: a measurement.
    DcgmEnergyCounter,
    /// The mean of DCGM's power gauge during the level × its wall time, summed over the GPUs:
    /// an estimate from samples of the power.
    DcgmPowerTimesTime,
    /// The delta of node_exporter's RAPL counters (packages and DRAM): a CPU server's.
    Rapl,
}

impl EnergySource {
    /// How the figure was made, in words.
    pub fn words(self) -> &'static str {
        match self {
            EnergySource::DcgmEnergyCounter => "DCGM energy counter",
            EnergySource::DcgmPowerTimesTime => "DCGM power × time (an estimate)",
            EnergySource::Rapl => "RAPL counters (CPU packages and DRAM)",
        }
    }
}

/// The energy a level took, as the server's metrics say it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergyReading {
    /// Joules over the level's wall time, summed over the devices.
    pub joules: f64,
    /// Where it came from.
    pub source: EnergySource,
    /// How many devices (GPUs, RAPL zones) were summed.
    pub devices: u32,
}

/// A device: its endpoint and its id (the `gpu` label, else its `UUID`; a RAPL zone's metric and
/// `index`).
type Device = (String, String);

fn device(s: &Reading, rapl: bool) -> Device {
    let endpoint = s.label(ENDPOINT_LABEL).unwrap_or("0").to_owned();
    let id = if rapl {
        format!(
            "{} {}",
            s.name
                .trim_start_matches("node_rapl_")
                .trim_end_matches("_joules_total"),
            s.label("index").unwrap_or("0")
        )
    } else {
        s.label("gpu")
            .or_else(|| s.label("UUID"))
            .unwrap_or("?")
            .to_owned()
    };
    (endpoint, id)
}

/// One device's counter over the level.
#[derive(Debug, Clone, Default)]
struct Track {
    /// Its value in the scrape right before the level, and when.
    before: Option<(f64, f64)>,
    /// Its value in the scrape right after it, and when.
    after: Option<(f64, f64)>,
    /// Its last value seen.
    last: Option<f64>,
    /// It fell between two scrapes.
    fell: bool,
    /// Scrapes with its family in which it was missing.
    missing: u32,
}

/// A level's energy, folded scrape by scrape ([`super::level::LevelFold`] hands it each one).
#[derive(Debug, Clone, Default)]
pub struct EnergyFold {
    counters: BTreeMap<Device, Track>,
    rapl: BTreeMap<Device, Track>,
    /// Per GPU: the sum and count of its power during the level.
    power: BTreeMap<Device, (f64, u32)>,
    /// Scrapes during the level with the power gauge.
    power_scrapes: u32,
}

/// Adds one scrape's values of the counters `names` to `tracks`.
fn track(tracks: &mut BTreeMap<Device, Track>, phase: Phase, snap: &Snapshot, names: &[&str]) {
    let rapl = names.iter().any(|n| n.starts_with("node_rapl_"));
    let mut seen: Vec<Device> = Vec::new();
    for s in snap
        .samples
        .iter()
        .filter(|s| names.contains(&s.name.as_str()))
    {
        let d = device(s, rapl);
        if seen.contains(&d) {
            continue;
        }
        seen.push(d.clone());
        let t = tracks.entry(d).or_default();
        if t.last.is_some_and(|v| s.value < v) {
            t.fell = true;
        }
        t.last = Some(s.value);
        match phase {
            Phase::Before => t.before = Some((snap.at_s, s.value)),
            Phase::After => t.after = Some((snap.at_s, s.value)),
            Phase::During => {}
        }
    }
    if seen.is_empty() {
        // A scrape without the family at all (its endpoint failed): no device is singled out.
        return;
    }
    for (d, t) in tracks.iter_mut() {
        if !seen.contains(d) {
            t.missing += 1;
        }
    }
}

/// A device for people: `GPU 1`, `GPU 1 of endpoint 2`, `RAPL package 0`.
fn shown(d: &Device, several: bool, rapl: bool) -> String {
    let what = if rapl {
        format!("RAPL {}", d.1)
    } else {
        format!("GPU {}", d.1)
    };
    if several {
        format!("{what} of endpoint {}", d.0)
    } else {
        what
    }
}

impl EnergyFold {
    /// Takes one scrape (already stripped of samples that are not data).
    pub fn add(&mut self, phase: Phase, snap: &Snapshot) {
        track(&mut self.counters, phase, snap, &[DCGM_ENERGY]);
        track(&mut self.rapl, phase, snap, &RAPL);
        if phase == Phase::During {
            let mut any = false;
            for s in snap.samples.iter().filter(|s| s.name == DCGM_POWER) {
                any = true;
                let e = self.power.entry(device(s, false)).or_insert((0.0, 0));
                e.0 += s.value;
                e.1 += 1;
            }
            self.power_scrapes += u32::from(any);
        }
    }

    /// The level's energy over its wall time `wall_s`, and what its reader must know (a counter
    /// that fell, a device missing from a scrape, the estimate used instead); `None` when no
    /// source gives it.
    pub fn finish(&self, wall_s: f64) -> (Option<EnergyReading>, Vec<String>) {
        let mut notes = Vec::new();
        if !self.counters.is_empty() {
            match counted(&self.counters, wall_s, false, &mut notes) {
                Some((joules, devices)) => {
                    let reading = EnergyReading {
                        joules,
                        source: EnergySource::DcgmEnergyCounter,
                        devices,
                    };
                    return (Some(reading), notes);
                }
                None => notes.push(format!(
                    "energy: {DCGM_ENERGY} not used for this level (see above)"
                )),
            }
        }
        if !self.power.is_empty() {
            return (self.power_times_time(wall_s, &mut notes), notes);
        }
        if !self.counters.is_empty() {
            notes.push(format!(
                "energy: no figure for this level ({DCGM_POWER} is not scraped either)"
            ));
            return (None, notes);
        }
        if !self.rapl.is_empty() {
            let reading = counted(&self.rapl, wall_s, true, &mut notes).map(|(joules, devices)| {
                EnergyReading {
                    joules,
                    source: EnergySource::Rapl,
                    devices,
                }
            });
            if reading.is_none() {
                notes.push("energy: no figure for this level (see above)".to_owned());
            }
            return (reading, notes);
        }
        (None, notes)
    }

    /// Each GPU's mean power during the level × its wall time, summed.
    fn power_times_time(&self, wall_s: f64, notes: &mut Vec<String>) -> Option<EnergyReading> {
        if self.power_scrapes == 0 || wall_s.is_nan() || wall_s <= 0.0 {
            notes.push(format!(
                "energy: no figure for this level (no scrape of {DCGM_POWER} fell inside it)"
            ));
            return None;
        }
        let several = endpoints(self.power.keys()) > 1;
        let mut joules = 0.0;
        for (d, (sum, n)) in &self.power {
            if *n < self.power_scrapes {
                notes.push(format!(
                    "energy: {} missing in {} of the level's {} power scrapes: its mean is over the others",
                    shown(d, several, false),
                    self.power_scrapes - n,
                    self.power_scrapes
                ));
            }
            joules += sum / f64::from(*n) * wall_s;
        }
        notes.push(format!(
            "energy: estimated from {DCGM_POWER} (each GPU's mean over {} scrape(s) × the level's {wall_s:.2} s), not measured by an energy counter",
            self.power_scrapes
        ));
        Some(EnergyReading {
            joules,
            source: EnergySource::DcgmPowerTimesTime,
            devices: u32::try_from(self.power.len()).unwrap_or(u32::MAX),
        })
    }
}

fn endpoints<'a>(devices: impl Iterator<Item = &'a Device>) -> usize {
    let mut e: Vec<&str> = devices.map(|d| d.0.as_str()).collect();
    e.sort_unstable();
    e.dedup();
    e.len()
}

/// Counter deltas before → after the level, summed over the devices and scaled to `wall_s`:
/// `(joules, devices)`; `None` (each reason in `notes`) when a device's counter fell or a device
/// is missing from the scrape before or after the level. DCGM's counter is in mJ, RAPL's in J.
fn counted(
    tracks: &BTreeMap<Device, Track>,
    wall_s: f64,
    rapl: bool,
    notes: &mut Vec<String>,
) -> Option<(f64, u32)> {
    let several = endpoints(tracks.keys()) > 1;
    let counter = if rapl { "RAPL counter" } else { DCGM_ENERGY };
    let mut ok = true;
    let (mut delta, mut span) = (0.0, 0.0_f64);
    for (d, t) in tracks {
        let who = shown(d, several, rapl);
        if t.fell {
            notes.push(format!(
                "energy: the {counter} of {who} fell during the level (a reset{}): its delta is not known",
                if rapl { " or a wrap" } else { "" }
            ));
            ok = false;
            continue;
        }
        let (Some((t0, v0)), Some((t1, v1))) = (t.before, t.after) else {
            let which = match (t.before, t.after) {
                (None, None) => "before and after",
                (None, _) => "before",
                _ => "after",
            };
            notes.push(format!(
                "energy: {who} missing in the scrape {which} the level: its delta is not known"
            ));
            ok = false;
            continue;
        };
        if t.missing > 0 {
            notes.push(format!(
                "energy: {who} missing in {} scrape(s) during the level (its delta spans them)",
                t.missing
            ));
        }
        delta += v1 - v0;
        span = span.max(t1 - t0);
    }
    if !ok {
        return None;
    }
    let joules = if rapl { delta } else { delta / 1000.0 };
    // The mean power between the two scrapes × the level's wall time.
    let scaled = if span > wall_s && wall_s > 0.0 {
        joules * wall_s / span
    } else {
        joules
    };
    Some((scaled, u32::try_from(tracks.len()).unwrap_or(u32::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(at_s: f64, samples: &[(&str, &str, f64)]) -> Snapshot {
        Snapshot {
            at_s,
            samples: samples
                .iter()
                .map(|(name, gpu, v)| Reading {
                    name: (*name).to_owned(),
                    labels: vec![
                        ("gpu".to_owned(), (*gpu).to_owned()),
                        (ENDPOINT_LABEL.to_owned(), "0".to_owned()),
                    ],
                    value: *v,
                })
                .collect(),
        }
    }

    /// Two GPUs whose counters rise at 300 W and 100 W: at `t` s, `t × W × 1000` mJ.
    fn energy_at(t: f64, gpus: &[&'static str]) -> Vec<(&'static str, &'static str, f64)> {
        gpus.iter()
            .map(|g| {
                let w = if *g == "0" { 300.0 } else { 100.0 };
                (DCGM_ENERGY, *g, (1e6 + t * w) * 1000.0)
            })
            .collect()
    }

    fn fold(scrapes: &[(Phase, Snapshot)]) -> EnergyFold {
        let mut f = EnergyFold::default();
        for (p, s) in scrapes {
            f.add(*p, s);
        }
        f
    }

    #[test]
    fn the_counter_delta_is_summed_over_gpus_and_scaled_to_the_level() {
        // Scrapes 0.1 s before and after a 2 s level: 400 W × 2 s = 800 J (not 880).
        let f = fold(&[
            (Phase::Before, snap(-0.1, &energy_at(-0.1, &["0", "1"]))),
            (Phase::During, snap(1.0, &energy_at(1.0, &["0", "1"]))),
            (Phase::After, snap(2.1, &energy_at(2.1, &["0", "1"]))),
        ]);
        let (r, notes) = f.finish(2.0);
        let r = r.unwrap();
        assert_eq!(r.source, EnergySource::DcgmEnergyCounter);
        assert_eq!(r.devices, 2);
        assert!((r.joules - 800.0).abs() < 1e-6, "{r:?}");
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn a_gpu_missing_in_one_scrape_neither_lowers_nor_raises_it() {
        // GPU 1 is missing from the scrape during the level: its delta spans it. Summed per
        // scrape, that scrape would read 300 W of energy less (and the next one more).
        let f = fold(&[
            (Phase::Before, snap(0.0, &energy_at(0.0, &["0", "1"]))),
            (Phase::During, snap(1.0, &energy_at(1.0, &["0"]))),
            (Phase::After, snap(2.0, &energy_at(2.0, &["0", "1"]))),
        ]);
        let (r, notes) = f.finish(2.0);
        assert!((r.unwrap().joules - 800.0).abs() < 1e-6);
        assert_eq!(
            notes,
            ["energy: GPU 1 missing in 1 scrape(s) during the level (its delta spans them)"]
        );
        // Missing from the scrape after the level: its delta is unknown, and no power gauge is
        // there: no figure at all, rather than 600 J (or a negative one).
        let f = fold(&[
            (Phase::Before, snap(0.0, &energy_at(0.0, &["0", "1"]))),
            (Phase::After, snap(2.0, &energy_at(2.0, &["0"]))),
        ]);
        let (r, notes) = f.finish(2.0);
        assert_eq!(r, None);
        assert!(
            notes[0]
                == "energy: GPU 1 missing in the scrape after the level: its delta is not known",
            "{notes:?}"
        );
        assert!(notes.iter().any(|n| n.contains("no figure")), "{notes:?}");
    }

    #[test]
    fn a_counter_reset_is_said_and_power_times_time_is_used() {
        let mut during = energy_at(1.0, &["0", "1"]);
        // GPU 1's counter restarted from 0 (its driver reloaded).
        during[1].2 = 5_000.0;
        let mut after = energy_at(2.0, &["0", "1"]);
        after[1].2 = 105_000.0;
        let power = |at: f64| snap(at, &[(DCGM_POWER, "0", 300.0), (DCGM_POWER, "1", 100.0)]);
        let mut d = snap(1.0, &during);
        d.samples.extend(power(1.0).samples);
        let f = fold(&[
            (Phase::Before, snap(0.0, &energy_at(0.0, &["0", "1"]))),
            (Phase::During, d),
            (Phase::After, snap(2.0, &after)),
        ]);
        let (r, notes) = f.finish(2.0);
        let r = r.unwrap();
        assert_eq!(r.source, EnergySource::DcgmPowerTimesTime);
        assert!((r.joules - 800.0).abs() < 1e-9, "{r:?}");
        assert!(
            notes[0].starts_with(&format!(
                "energy: the {DCGM_ENERGY} of GPU 1 fell during the level (a reset)"
            )),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("energy: estimated from DCGM_FI_DEV_POWER_USAGE")),
            "{notes:?}"
        );
    }

    #[test]
    fn power_times_time_with_a_gpu_missing_in_one_scrape() {
        let f = fold(&[
            (
                Phase::During,
                snap(0.5, &[(DCGM_POWER, "0", 200.0), (DCGM_POWER, "1", 100.0)]),
            ),
            (Phase::During, snap(1.5, &[(DCGM_POWER, "0", 400.0)])),
        ]);
        let (r, notes) = f.finish(4.0);
        let r = r.unwrap();
        // GPU 0: 300 W mean, GPU 1: 100 W (its one scrape): 400 W × 4 s.
        assert_eq!(r.source, EnergySource::DcgmPowerTimesTime);
        assert_eq!(r.devices, 2);
        assert!((r.joules - 1600.0).abs() < 1e-9, "{r:?}");
        assert!(
            notes[0].starts_with("energy: GPU 1 missing in 1 of the level's 2 power scrapes"),
            "{notes:?}"
        );
        // No scrape inside the level: no figure.
        let (r, notes) = EnergyFold::default().finish(1.0);
        assert_eq!((r, notes.len()), (None, 0));
    }

    #[test]
    fn rapl_counters_for_a_cpu_server_and_a_wrap() {
        let rapl = |at: f64, pkg: f64, dram: f64| Snapshot {
            at_s: at,
            samples: vec![
                Reading {
                    name: RAPL[0].into(),
                    labels: vec![("index".into(), "0".into())],
                    value: pkg,
                },
                Reading {
                    name: RAPL[1].into(),
                    labels: vec![("index".into(), "0".into())],
                    value: dram,
                },
            ],
        };
        let f = fold(&[
            (Phase::Before, rapl(0.0, 1000.0, 100.0)),
            (Phase::After, rapl(1.0, 1150.0, 110.0)),
        ]);
        let (r, notes) = f.finish(1.0);
        let r = r.unwrap();
        assert_eq!((r.source, r.devices), (EnergySource::Rapl, 2));
        assert!((r.joules - 160.0).abs() < 1e-9);
        assert!(notes.is_empty());
        let f = fold(&[
            (Phase::Before, rapl(0.0, 262_000.0, 100.0)),
            (Phase::After, rapl(1.0, 50.0, 110.0)),
        ]);
        let (r, notes) = f.finish(1.0);
        assert_eq!(r, None);
        assert!(
            notes[0].starts_with("energy: the RAPL counter of RAPL package 0 fell"),
            "{notes:?}"
        );
    }
}
