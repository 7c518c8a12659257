//! A report as every output shows it (pure): what each output would otherwise work out again,
//! worked out once.

use crate::bench::report::{ModelReport, Report, model_names};

/// A report as every output shows it: the report, and its models' names, worked out once
/// (`target/model` when their targets differ, with ` · prompt` in a prompt sweep:
/// [`model_names`]).
#[derive(Debug, Clone)]
pub struct Shown<'a> {
    /// The report.
    pub report: &'a Report,
    /// Its models' names, in their order.
    pub names: Vec<String>,
}

impl<'a> Shown<'a> {
    /// `report` as the outputs show it.
    pub fn of(report: &'a Report) -> Shown<'a> {
        Shown {
            report,
            names: model_names(&report.models),
        }
    }

    /// Each model with its name.
    pub fn models(&self) -> impl Iterator<Item = (&'a ModelReport, &String)> {
        self.report.models.iter().zip(&self.names)
    }
}
