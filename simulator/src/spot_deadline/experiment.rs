//! The `spot-deadline` experiment file: strict TOML parsing, validation that names every bad field,
//! and loading of the traces it refers to (paths relative to the experiment file's directory).

use std::path::{Path, PathBuf};

use scheduler::model::FieldErrors;
use serde::Deserialize;

use super::policies;
use super::trace::{self, TraceConvention};

/// The `[experiment] kind` this module runs.
pub const KIND: &str = "spot-deadline";

/// A parsed and validated experiment, traces loaded and resampled to the tick.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// Length of one tick in seconds (whole milliseconds).
    pub tick_seconds: f64,
    /// Policies to compare, by name (see [`policies::NAMES`]).
    pub policies: Vec<String>,
    /// One run per offset (hours into the traces); a run starts at tick
    /// `round(offset_hours × 3600 / tick_seconds)`.
    pub start_offsets_hours: Vec<f64>,
    /// The job every run finishes.
    pub job: Job,
    /// The regions, in file order; the first is the job's home region (where the baselines run).
    pub regions: Vec<Region>,
    /// Egress rates between regions, by index into `regions`.
    pub egress: Vec<Egress>,
}

/// The deadline job of an experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Work to do, in hours of running time (excluding restart overheads).
    pub work_hours: f64,
    /// The deadline, in hours after the run's start.
    pub deadline_hours: f64,
    /// Running time without progress after every start.
    pub restart_overhead_hours: f64,
    /// Checkpoint moved on every change of region.
    pub checkpoint_gb: f64,
}

/// The spot price of a region.
#[derive(Clone, Debug, PartialEq)]
pub enum SpotPrice {
    /// One price for every tick.
    Fixed(f64),
    /// One price per tick of the trace (resampled), indexed like the availability trace.
    PerTick(Vec<f64>),
}

/// One region of an experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct Region {
    /// Its name, unique within the experiment.
    pub name: String,
    /// USD per VM-hour for a regular VM.
    pub regular_price_per_hour: f64,
    /// False when the region has no regular capacity at all.
    pub regular_available: bool,
    /// USD per VM-hour for a spot VM.
    pub spot_price: SpotPrice,
    /// Per trace tick: may a spot VM run in that tick.
    pub spot_available: Vec<bool>,
}

impl Region {
    /// The spot price at trace tick `tick`.
    pub fn spot_price_at(&self, tick: usize) -> f64 {
        match &self.spot_price {
            SpotPrice::Fixed(p) => *p,
            SpotPrice::PerTick(v) => v.get(tick).or(v.last()).copied().unwrap_or(0.0),
        }
    }

    /// Ticks of trace this region covers (availability, and prices when they are a trace).
    pub fn trace_ticks(&self) -> usize {
        match &self.spot_price {
            SpotPrice::Fixed(_) => self.spot_available.len(),
            SpotPrice::PerTick(v) => self.spot_available.len().min(v.len()),
        }
    }
}

/// Egress price from one region to another (indices into [`Experiment::regions`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Egress {
    /// Source region index.
    pub from: usize,
    /// Destination region index.
    pub to: usize,
    /// USD per GB moved.
    pub usd_per_gb: f64,
}

impl Experiment {
    /// Reads and validates an experiment file; trace paths resolve against the file's directory.
    pub fn load(path: &Path) -> Result<Experiment, FieldErrors> {
        let content = std::fs::read_to_string(path).map_err(|e| {
            let mut errs = FieldErrors::default();
            errs.push("", format!("cannot read {}: {e}", path.display()));
            errs
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Experiment::parse(&content, &dir)
    }

    /// Parses and validates experiment TOML; trace paths resolve against `base_dir`.
    /// Every problem is reported with its field path (`regions[1].spot_price_per_hour`).
    pub fn parse(content: &str, base_dir: &Path) -> Result<Experiment, FieldErrors> {
        let mut errs = FieldErrors::default();
        // The kind first, leniently: a file of another kind must be told so, not about its fields.
        if let Ok(head) = toml::from_str::<KindOnly>(content)
            && head.experiment.kind != KIND
        {
            errs.push("experiment.kind", format!("unknown kind {:?}; supported: {KIND}", head.experiment.kind));
            return Err(errs);
        }
        let raw: RawFile = match serde_path_to_error::deserialize(toml::Deserializer::new(content)) {
            Ok(r) => r,
            Err(e) => {
                let path = e.path().to_string();
                let message = e.into_inner().message().trim().to_string();
                errs.push(field_of(&path, &message), message);
                return Err(errs);
            }
        };
        if raw.experiment.kind != KIND {
            errs.push("experiment.kind", format!("unknown kind {:?}; supported: {KIND}", raw.experiment.kind));
            return Err(errs);
        }
        let ex = raw.experiment;

        let tick_seconds = ex.tick_seconds;
        if !(tick_seconds.is_finite() && tick_seconds >= 1.0 && (tick_seconds * 1000.0).fract() == 0.0) {
            errs.push("experiment.tick_seconds", "must be at least 1 (whole milliseconds)");
        }
        let policies = ex.policies.unwrap_or_else(|| policies::NAMES.iter().map(|s| s.to_string()).collect());
        if policies.is_empty() {
            errs.push("experiment.policies", "must name at least one policy");
        }
        for (i, p) in policies.iter().enumerate() {
            if !policies::NAMES.contains(&p.as_str()) {
                errs.push(
                    format!("experiment.policies[{i}]"),
                    format!("unknown policy {p:?}; known: {}", policies::NAMES.join(", ")),
                );
            } else if policies[..i].contains(p) {
                errs.push(format!("experiment.policies[{i}]"), format!("{p:?} is listed twice"));
            }
        }
        match (&ex.start_offsets_hours, ex.start_offset_every_hours) {
            (Some(_), Some(_)) | (None, None) => errs.push(
                "experiment.start_offsets_hours",
                "set exactly one of start_offsets_hours (a list) and start_offset_every_hours (a step)",
            ),
            (Some(list), None) => {
                if list.is_empty() {
                    errs.push("experiment.start_offsets_hours", "must list at least one offset");
                }
                for (i, h) in list.iter().enumerate() {
                    if !(h.is_finite() && *h >= 0.0) {
                        errs.push(format!("experiment.start_offsets_hours[{i}]"), "must be a number of hours ≥ 0");
                    }
                }
            }
            (None, Some(step)) => {
                if !(step.is_finite() && step > 0.0) {
                    errs.push("experiment.start_offset_every_hours", "must be a number of hours > 0");
                }
            }
        }

        let job = Job {
            work_hours: raw.job.work_hours,
            deadline_hours: raw.job.deadline_hours,
            restart_overhead_hours: raw.job.restart_overhead_hours.unwrap_or(0.0),
            checkpoint_gb: raw.job.checkpoint_gb.unwrap_or(0.0),
        };
        if !(job.work_hours.is_finite() && job.work_hours > 0.0) {
            errs.push("job.work_hours", "must be a number of hours > 0");
        }
        if !(job.deadline_hours.is_finite() && job.deadline_hours > 0.0) {
            errs.push("job.deadline_hours", "must be a number of hours > 0");
        } else if job.work_hours.is_finite()
            && job.deadline_hours < job.work_hours + job.restart_overhead_hours.max(0.0)
        {
            errs.push("job.deadline_hours", "must leave room for work_hours plus one restart_overhead_hours");
        }
        if !(job.restart_overhead_hours.is_finite() && job.restart_overhead_hours >= 0.0) {
            errs.push("job.restart_overhead_hours", "must be a number of hours ≥ 0");
        }
        if !(job.checkpoint_gb.is_finite() && job.checkpoint_gb >= 0.0) {
            errs.push("job.checkpoint_gb", "must be a number ≥ 0");
        }

        if raw.regions.is_empty() {
            errs.push("regions", "at least one [[regions]] is required");
        }
        let tick_ok = !errs.0.iter().any(|e| e.field == "experiment.tick_seconds");
        let mut regions = Vec::new();
        for (i, r) in raw.regions.iter().enumerate() {
            let f = |k: &str| format!("regions[{i}].{k}");
            if r.name.trim().is_empty() {
                errs.push(f("name"), "must not be empty");
            } else if raw.regions[..i].iter().any(|o| o.name == r.name) {
                errs.push(f("name"), format!("{:?} is used by another region", r.name));
            }
            if !(r.regular_price_per_hour.is_finite() && r.regular_price_per_hour >= 0.0) {
                errs.push(f("regular_price_per_hour"), "must be a price ≥ 0 (USD per VM-hour)");
            }
            let min_count = r.min_available_count.unwrap_or(1.0);
            if !(min_count.is_finite() && min_count > 0.0) {
                errs.push(f("min_available_count"), "must be a number > 0");
            }
            let convention = r.trace_convention.unwrap_or(TraceConvention::Available);
            let spot_available = if tick_ok {
                match trace::load_availability(
                    &resolve(base_dir, &r.spot_availability_trace),
                    convention,
                    min_count,
                    tick_seconds,
                ) {
                    Ok(v) if v.is_empty() => {
                        errs.push(f("spot_availability_trace"), "the trace is shorter than one tick");
                        Vec::new()
                    }
                    Ok(v) => v,
                    Err(e) => {
                        errs.push(f("spot_availability_trace"), e);
                        Vec::new()
                    }
                }
            } else {
                Vec::new()
            };
            let spot_price = match (&r.spot_price_per_hour, &r.spot_price_trace) {
                (Some(p), None) => {
                    if !(p.is_finite() && *p >= 0.0) {
                        errs.push(f("spot_price_per_hour"), "must be a price ≥ 0 (USD per VM-hour)");
                    }
                    SpotPrice::Fixed(*p)
                }
                (None, Some(file)) if tick_ok => match trace::load_prices(&resolve(base_dir, file), tick_seconds) {
                    Ok(v) => SpotPrice::PerTick(v),
                    Err(e) => {
                        errs.push(f("spot_price_trace"), e);
                        SpotPrice::Fixed(0.0)
                    }
                },
                (None, Some(_)) => SpotPrice::Fixed(0.0),
                _ => {
                    errs.push(f("spot_price_per_hour"), "set exactly one of spot_price_per_hour and spot_price_trace");
                    SpotPrice::Fixed(0.0)
                }
            };
            regions.push(Region {
                name: r.name.clone(),
                regular_price_per_hour: r.regular_price_per_hour,
                regular_available: r.regular_available.unwrap_or(true),
                spot_price,
                spot_available,
            });
        }

        let mut egress: Vec<Egress> = Vec::new();
        for (i, e) in raw.egress.iter().enumerate() {
            let find = |name: &str, key: &str, errs: &mut FieldErrors| {
                let idx = regions.iter().position(|r| r.name == name);
                if idx.is_none() {
                    errs.push(format!("egress[{i}].{key}"), format!("no region named {name:?}"));
                }
                idx
            };
            let from = find(&e.from, "from", &mut errs);
            let to = find(&e.to, "to", &mut errs);
            if !(e.usd_per_gb.is_finite() && e.usd_per_gb >= 0.0) {
                errs.push(format!("egress[{i}].usd_per_gb"), "must be a price ≥ 0 (USD per GB)");
            }
            if let (Some(from), Some(to)) = (from, to) {
                if from == to {
                    errs.push(format!("egress[{i}].to"), "must differ from `from`");
                } else if egress.iter().any(|x| x.from == from && x.to == to) {
                    errs.push(format!("egress[{i}]"), format!("{} → {} is listed twice", e.from, e.to));
                } else {
                    egress.push(Egress { from, to, usd_per_gb: e.usd_per_gb });
                }
            }
        }

        if !errs.is_empty() {
            return Err(errs);
        }
        let mut experiment =
            Experiment { tick_seconds, policies, start_offsets_hours: Vec::new(), job, regions, egress };
        let horizon = experiment.horizon_ticks();
        let window = experiment.deadline_ticks();
        let trace_hours = horizon as f64 * tick_seconds / 3600.0;
        match (ex.start_offsets_hours, ex.start_offset_every_hours) {
            (Some(list), _) => {
                for (i, h) in list.iter().enumerate() {
                    if experiment.start_tick(*h) + window > horizon {
                        errs.push(
                            format!("experiment.start_offsets_hours[{i}]"),
                            format!(
                                "{h} h plus the {} h deadline runs past the end of the shortest trace ({trace_hours:.1} h)",
                                experiment.job.deadline_hours
                            ),
                        );
                    }
                }
                experiment.start_offsets_hours = list;
            }
            (None, Some(step)) => {
                let mut k = 0u32;
                loop {
                    let h = f64::from(k) * step;
                    if experiment.start_tick(h) + window > horizon {
                        break;
                    }
                    experiment.start_offsets_hours.push(h);
                    k += 1;
                }
                if experiment.start_offsets_hours.is_empty() {
                    errs.push(
                        "experiment.start_offset_every_hours",
                        format!(
                            "the shortest trace ({trace_hours:.1} h) is shorter than the {} h deadline: no run fits",
                            experiment.job.deadline_hours
                        ),
                    );
                }
            }
            // Rejected above, with its error.
            (None, None) => {}
        }
        errs.into_result(experiment)
    }

    /// The trace tick at which a run with this offset starts.
    pub fn start_tick(&self, offset_hours: f64) -> usize {
        (offset_hours * 3600.0 / self.tick_seconds).round() as usize
    }

    /// Whole ticks covered by every region's traces: no run is simulated past this tick.
    pub fn horizon_ticks(&self) -> usize {
        self.regions.iter().map(Region::trace_ticks).min().unwrap_or(0)
    }

    /// Ticks from a run's start to its deadline, rounded up.
    pub fn deadline_ticks(&self) -> usize {
        (self.job.deadline_hours * 3600.0 / self.tick_seconds).ceil() as usize
    }

    /// USD per GB to move the checkpoint from region `from` to region `to`: the listed rate, else the
    /// rate listed for the reverse direction, else 0.
    pub fn egress_usd_per_gb(&self, from: usize, to: usize) -> f64 {
        if from == to {
            return 0.0;
        }
        let find = |a: usize, b: usize| self.egress.iter().find(|e| e.from == a && e.to == b).map(|e| e.usd_per_gb);
        find(from, to).or_else(|| find(to, from)).unwrap_or(0.0)
    }
}

fn resolve(base: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

/// The field a serde error is about: its path, completed with the missing field's name.
fn field_of(path: &str, message: &str) -> String {
    let base = if path == "." { String::new() } else { path.to_string() };
    if let Some(rest) = message.strip_prefix("missing field `")
        && let Some(name) = rest.split('`').next()
    {
        return if base.is_empty() { name.to_string() } else { format!("{base}.{name}") };
    }
    base
}

#[derive(Deserialize)]
struct KindOnly {
    experiment: KindOnlyExperiment,
}

#[derive(Deserialize)]
struct KindOnlyExperiment {
    kind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    experiment: RawExperiment,
    job: RawJob,
    #[serde(default)]
    regions: Vec<RawRegion>,
    #[serde(default)]
    egress: Vec<RawEgress>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExperiment {
    kind: String,
    tick_seconds: f64,
    policies: Option<Vec<String>>,
    start_offsets_hours: Option<Vec<f64>>,
    start_offset_every_hours: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    work_hours: f64,
    deadline_hours: f64,
    restart_overhead_hours: Option<f64>,
    checkpoint_gb: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegion {
    name: String,
    regular_price_per_hour: f64,
    regular_available: Option<bool>,
    spot_price_per_hour: Option<f64>,
    spot_price_trace: Option<String>,
    spot_availability_trace: String,
    trace_convention: Option<TraceConvention>,
    min_available_count: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEgress {
    from: String,
    to: String,
    usd_per_gb: f64,
}
